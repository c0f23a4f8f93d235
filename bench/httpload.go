package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/bench/internal/hist"
)

// httpTarget is a POST endpoint the load generators call.
type httpTarget struct {
	hc    *fasthttp.HostClient
	url   string // full URL
	token string // bearer token, or ""
	body  []byte
}

func newTarget(baseURL, path, token string, body []byte, conns int) *httpTarget {
	host := strings.TrimPrefix(baseURL, "http://")
	return &httpTarget{
		hc:  &fasthttp.HostClient{Addr: host, MaxConns: conns, ReadTimeout: 60 * time.Second, WriteTimeout: 10 * time.Second, MaxIdleConnDuration: time.Minute},
		url: baseURL + path, token: token, body: body,
	}
}

// post sends one request and returns the ids in the answer ({"id": ...} or
// {"ids": [...]}).
func (t *httpTarget) post() ([]string, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(t.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	req.SetBodyRaw(t.body)
	if err := t.hc.Do(req, resp); err != nil {
		return nil, err
	}
	if sc := resp.StatusCode(); sc != fasthttp.StatusAccepted && sc != fasthttp.StatusOK && sc != fasthttp.StatusCreated {
		return nil, fmt.Errorf("HTTP %d: %.200s", sc, resp.Body())
	}
	var out struct {
		ID  string   `json:"id"`
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal(resp.Body(), &out); err != nil {
		return nil, fmt.Errorf("cannot decode answer: %w", err)
	}
	if out.ID != "" {
		out.IDs = append(out.IDs, out.ID)
	}
	return out.IDs, nil
}

// loadResult is what a load generator saw.
type loadResult struct {
	ok, errs, skipped int64
	elapsed           time.Duration
	lat               hist.Hist
	firstErr          string
	sent              map[string]int64 // id → unix nanos the request was sent (open loop)
}

func (r *loadResult) rate() float64 { return float64(r.ok) / r.elapsed.Seconds() }

// openLoop sends rate requests per second for d on a fixed schedule, never
// waiting for answers (at most maxInFlight outstanding; beyond that a
// request is skipped and counted), and records each id's send time.
func (t *httpTarget) openLoop(rate int, d time.Duration, maxInFlight int) *loadResult {
	res := &loadResult{sent: map[string]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	total := int(d / interval)
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		select {
		case sem <- struct{}{}:
		default:
			res.skipped++
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			sent := time.Now()
			ids, err := t.post()
			lat := time.Since(sent)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.errs++
				if res.firstErr == "" {
					res.firstErr = err.Error()
				}
				return
			}
			res.ok++
			res.lat.AddDuration(lat)
			for _, id := range ids {
				res.sent[id] = sent.UnixNano()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// closedLoop runs conns clients that each send the next request as soon as
// the previous answer arrived, for d after a warm-up of warm.
func (t *httpTarget) closedLoop(conns int, warm, d time.Duration) *loadResult {
	res := &loadResult{}
	var ok, errs atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	begin := time.Now()
	measureFrom := begin.Add(warm)
	stop := measureFrom.Add(d)
	for range conns {
		wg.Go(func() {
			for {
				sent := time.Now()
				if sent.After(stop) {
					return
				}
				_, err := t.post()
				lat := time.Since(sent)
				if sent.Before(measureFrom) {
					continue
				}
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if res.firstErr == "" {
						res.firstErr = err.Error()
					}
					mu.Unlock()
					continue
				}
				ok.Add(1)
				res.lat.AddDuration(lat)
			}
		})
	}
	wg.Wait()
	res.ok, res.errs = ok.Load(), errs.Load()
	res.elapsed = d
	return res
}
