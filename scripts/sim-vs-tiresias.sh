#!/usr/bin/env bash
# sim-vs-tiresias.sh: run rlsched sim and Tiresias' published simulator
# (github.com/SymbioticLab/Tiresias, simulator/, Apache-2.0) side by side on
# the same trace and cluster, and print each one's mean JCT and mean wait
# (docs/sim.md, "Checked against a published simulator"). Tiresias' code is
# used where it lies, never copied here.
#
# Usage: scripts/sim-vs-tiresias.sh TIRESIAS_SIMULATOR_DIR [NODES [GPUS_PER_NODE [TRACE]]]
#   TRACE: a Tiresias job file (job_id,num_gpu,submit_time,...,duration), default its 60_job.csv.
# Needs python3 with numpy (Debian: python3-numpy) and rlsched on PATH (or $RLSCHED_BIN).
set -euo pipefail

dir=${1:?usage: $0 TIRESIAS_SIMULATOR_DIR [NODES [GPUS_PER_NODE [TRACE]]]}
nodes=${2:-2}
gpus=${3:-8}
trace=${4:-$dir/60_job.csv}
rlsched=${RLSCHED_BIN:-rlsched}
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf 'num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,%d,%d,128,256\n' "$nodes" "$gpus" >"$work/spec.csv"
printf '{"workers": [{"id": "n", "count": %d, "gpus": %d, "slots": 1}]}\n' "$nodes" "$gpus" >"$work/cluster.json"

# The same jobs as a Helios log: one user, each running its duration from its submission.
"$py" - "$trace" "$work/helios.csv" <<'PY'
import csv, datetime, sys
t0 = datetime.datetime(2020, 1, 1)
at = lambda s: (t0 + datetime.timedelta(seconds=s)).strftime('%Y-%m-%d %H:%M:%S')
with open(sys.argv[2], 'w') as out:
    out.write('job_id,user,gpu_num,submit_time,start_time,end_time\n')
    for r in csv.DictReader(open(sys.argv[1])):
        s, d = int(r['submit_time']), int(r['duration'])
        out.write('%s,u,%s,%s,%s,%s\n' % (r['job_id'], r['num_gpu'], at(s), at(s), at(s + d)))
PY

# Tiresias' simulator is Python 2.7: sys.maxint is the one name it needs that python3 lacks.
for sched in fjf dlas-gpu; do
	(cd "$dir" && "$py" -c 'import sys, runpy; sys.maxint = sys.maxsize; sys.path.insert(0, "."); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")' \
		run_sim.py --cluster_spec="$work/spec.csv" --scheme=count --trace_file="$trace" --schedule="$sched" --log_path="$work/tiresias-$sched" >/dev/null)
	"$py" - "$work/tiresias-$sched/job.csv" "$sched" <<'PY'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))
print('tiresias %-9s %d jobs, mean JCT %.2f s, mean wait %.2f s, preemptions %d' % (sys.argv[2], len(r),
      sum(float(x['JCT']) for x in r) / len(r), sum(float(x['pending_time']) for x in r) / len(r), sum(int(x['preempt']) for x in r)))
PY
done
"$rlsched" sim --cluster "$work/cluster.json" --trace "$work/helios.csv" --format helios --policies fifo,tiresias --json 2>/dev/null |
	"$py" -c '
import json, sys
for p in json.load(sys.stdin)["policies"]:
    print("rlsched  %-9s %d jobs, mean JCT %.2f s, mean wait %.2f s, preemptions %d" % (p["policy"], p["jobs"], p["jct"]["mean"], p["wait"]["mean"], p["preemptions"]))'
