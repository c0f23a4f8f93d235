# The fake nvidia-smi of rlsched's tests (standard library only). fakesmi.Install
# writes it as "nvidia-smi" with a shebang naming the test machine's python3. It
# answers only what rlsched asks:
#   --query-gpu=FIELDS --format=csv[,noheader][,nounits]
#   --query-compute-apps=FIELDS --format=...
#   -L / --list-gpus
#   topo -m (the matrix, with each GPU's "cpu_affinity" from the state)
# from nvidia-smi.json beside it (rewritten by the test through temp + rename,
# so every call reads one whole state). Each query's "behaviour" in the state
# can make it hang, fail, pad its fields or print other output instead.
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.realpath(__file__))
STATE = os.path.join(HERE, "nvidia-smi.json")
HANG_PIDS = os.path.join(HERE, "hang.pids")

GPU_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "memory.free",
              "utilization.gpu", "pci.bus_id")
APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name", "gpu_name")
UNITS = {"memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB",
         "used_memory": "MiB", "utilization.gpu": "%"}


def load():
    try:
        with open(STATE) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def usage(msg):
    sys.stdout.write(msg + "\nPlease run 'nvidia-smi -h' for help.\n")
    sys.exit(2)


def behave(b):
    """Applies a query's behaviour that replaces the answer; returns on none."""
    if b.get("hang"):
        # A child holds stdout too, as a wedged driver call's helper would:
        # only killing the whole process group frees the caller's pipe.
        child = os.fork()
        if child == 0:
            time.sleep(1e6)
            os._exit(0)
        with open(HANG_PIDS + ".tmp", "w") as f:
            f.write("%d %d\n" % (os.getpid(), child))
        os.rename(HANG_PIDS + ".tmp", HANG_PIDS)
        time.sleep(1e6)
    if b.get("exit"):
        sys.stdout.write(b.get("stdout", ""))
        sys.stderr.write(b.get("stderr", ""))
        sys.stdout.flush()
        sys.exit(b["exit"])


def cell(row, field, units, computed):
    raw = (row.get("raw") or {}).get(field)
    if raw is not None:
        return raw
    v = computed.get(field, row.get(field))
    if v is None:
        return "[N/A]"
    s = str(v)
    if units and field in UNITS:
        s += " " + UNITS[field]
    return s


def answer(fields, rows, allowed, fmt, b, computed):
    if not fmt.startswith("csv"):
        usage('"--format=%s" is not a valid format.' % fmt)
    opts = fmt.split(",")[1:]
    for f in fields:
        if f not in allowed:
            usage('Field "%s" is not a valid field to query.' % f)
    behave(b)
    eol = "\r\n" if b.get("crlf") else "\n"
    if "output" in b:  # printed instead of the rows: garbage, short rows, ...
        sys.stdout.write(b["output"])
        return
    sep = "," + " " * (1 + b.get("spaces", 0))
    pad = " " * b.get("spaces", 0)
    out = []
    if "noheader" not in opts:
        out.append(sep.join(f + (" [%s]" % UNITS[f] if f in UNITS and "nounits" not in opts else "")
                            for f in fields))
    for row in rows:
        out.append(pad + sep.join(cell(row, f, "nounits" not in opts, computed(row)) for f in fields) + pad)
    sys.stdout.write("".join(line + eol for line in out))


def gpu_computed(row):
    c = {}
    if isinstance(row.get("memory.total"), int) and isinstance(row.get("memory.used"), int):
        c["memory.free"] = row["memory.total"] - row["memory.used"]
    c["pci.bus_id"] = "00000000:%02X:00.0" % (int(row.get("index", 0)) + 1)
    return c


def topo(gpus, b):
    behave(b)
    if "output" in b:
        sys.stdout.write(b["output"])
        return
    names = ["GPU%s" % g.get("index") for g in gpus]
    out = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i, g in enumerate(gpus):
        links = [" X " if j == i else "NV12" for j in range(len(gpus))]
        out.append(names[i] + "\t" + "\t".join(links) + "\t" + (g.get("cpu_affinity") or "N/A") + "\t0\t\tN/A")
    out += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks"]
    sys.stdout.write("\n".join(out) + "\n")


def main(argv):
    st = load()
    gpus = st.get("gpus") or []
    procs = st.get("procs") or []
    beh = st.get("behaviour") or {}
    query_gpu = query_apps = None
    fmt = ""
    list_gpus = False
    if argv[:2] == ["topo", "-m"]:
        topo(gpus, beh.get("topo") or {})
        return
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if name in ("--query-gpu", "--query-compute-apps", "--format") and not eq:
            i += 1
            val = argv[i] if i < len(argv) else ""
        if name == "--query-gpu":
            query_gpu = val
        elif name == "--query-compute-apps":
            query_apps = val
        elif name == "--format":
            fmt = val
        elif a in ("-L", "--list-gpus"):
            list_gpus = True
        else:
            usage('Invalid combination of input arguments: "%s".' % a)
        i += 1
    if list_gpus:
        b = beh.get("list") or {}
        behave(b)
        for g in gpus:
            sys.stdout.write("GPU %s: %s (UUID: %s)\n" % (g.get("index"), g.get("name"), g.get("uuid")))
        return
    if query_gpu is not None:
        answer([f.strip() for f in query_gpu.split(",")], gpus, GPU_FIELDS, fmt,
               beh.get("gpu") or {}, gpu_computed)
        return
    if query_apps is not None:
        names = {g.get("uuid"): g.get("name") for g in gpus}
        answer([f.strip() for f in query_apps.split(",")], procs, APP_FIELDS, fmt,
               beh.get("apps") or {},
               lambda p: {"process_name": p.get("process_name") or "python",
                          "gpu_name": names.get(p.get("gpu_uuid"), "[N/A]")})
        return
    usage("No query given.")


if __name__ == "__main__":
    main(sys.argv[1:])
