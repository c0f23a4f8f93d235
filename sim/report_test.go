package sim

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"time"
)

func TestParsePolicy(t *testing.T) {
	f := func(spec string, want Policy) {
		t.Helper()
		got, err := ParsePolicy(spec)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", spec, got, err, want)
		}
	}
	f("rlsched", Policy{Name: "rlsched"})
	f("fifo", Policy{Name: "fifo", FIFO: true, BackfillReserve: -1, PreemptCooldown: -1})
	f("hl24:halflife=24h,reserve=off", Policy{Name: "hl24", HalfLife: 24 * time.Hour, BackfillReserve: -1})
	f("x:preempt=off,quota=8,fifo=true", Policy{Name: "x", PreemptCooldown: -1, DefaultGPUQuota: 8, FIFO: true})
	f("sjf", Policy{Name: "sjf", FIFO: true, BackfillReserve: -1, PreemptCooldown: -1, Order: OrderSJF})
	f("tiresias", Policy{Name: "tiresias", FIFO: true, BackfillReserve: -1, PreemptCooldown: time.Second, Order: OrderTiresias})
	f("t2:order=tiresias", Policy{Name: "t2", Order: OrderTiresias})
	f("fifo:reserve=60s", Policy{Name: "fifo", FIFO: true, BackfillReserve: time.Minute, PreemptCooldown: -1})
	for _, bad := range []string{"", ":halflife=1h", "x:halflife=0s", "x:reserve=soon", "x:quota=-1", "x:what=1", "x:halflife", "x:order=lifo"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestWriteTableAndJobsCSV(t *testing.T) {
	r, _ := run(t, cluster(1, 1), Config{Policy: Policy{Name: "rlsched"}}, job("a", "u", 0, time.Hour, 1), job("b", "u", 0, 2*time.Hour, 1))
	var b bytes.Buffer
	if err := WriteTable(&b, []Summary{r.Summarize(), r.Summarize()}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rlsched  rlsched", "JCT mean", "2h00m", "100.0%"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	b.WriteString(strings.Join(JobsCSVHeader, ",") + "\n")
	if err := WriteJobsCSV(&b, r); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(rows) != 3 || rows[2][1] != "b" || rows[2][7] != "3600" || rows[2][8] != "10800" {
		t.Errorf("csv %v %v", rows, err)
	}
}
