#!/bin/sh
# Notice-to-signal latency (issue 3): from the mock metadata server's flip to the trainer
# receiving SIGTERM, per provider, under `spotvisor run` (poll_interval 1s; GCP long-polls)
# and, side by side, under the loop people copy from the providers' docs
# (`while ! curl -sf ...; do sleep 5; done; kill -TERM ...`), measured the same way.
# The flip happens at a random phase of the polling period (uniform), so the numbers are
# what a preemption at a random moment sees. Prints a Markdown table for docs/BENCHMARKS.md.
#
#   tests/bench/notice_latency_bench.sh [--build build] [--trials 50] [--baseline-trials 50]
#                                       [--providers aws,gcp,azure,alibaba]
#
# Needs a built `spotvisor`, /usr/bin/python3 and curl. Run from the repository root.
exec /usr/bin/python3 - "$@" <<'PY'
import argparse, http.client, json, os, random, shutil, signal, statistics, subprocess, sys
import tempfile, time

CHILD = r'''
import os, signal, sys, time
out = sys.argv[1]
def on_term(sig, frame):
    t = time.time_ns()
    with open(out + ".tmp", "w") as f:
        f.write(str(t))
    os.rename(out + ".tmp", out)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
open(out + ".ready", "w").close()
while True:
    time.sleep(3600)
'''

# The loops from the providers' docs and common blog posts, as users paste them.
BASELINE = {
    "aws": 'TOKEN=$(curl -sf -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 21600" {url}/latest/api/token); '
           'while ! curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" {url}/latest/meta-data/spot/instance-action >/dev/null; '
           'do sleep 5; done; kill -TERM {pid}',
    "gcp": 'while [ "$(curl -sf -H "Metadata-Flavor: Google" {url}/computeMetadata/v1/instance/preempted)" != "TRUE" ]; '
           'do sleep 5; done; kill -TERM {pid}',
    "azure": 'while ! curl -sf -H "Metadata: true" "{url}/metadata/scheduledevents?api-version=2020-07-01" | grep -q Preempt; '
             'do sleep 5; done; kill -TERM {pid}',
    "alibaba": 'while ! curl -sf {url}/latest/meta-data/instance/spot/termination-time >/dev/null; '
               'do sleep 5; done; kill -TERM {pid}',
}


def wait_for(path, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def control(port, what):
    """POSTs a control path; returns the wall-clock time just before the request left."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.connect()
    t0 = time.time_ns()
    conn.request("POST", "/__spotvisor/" + what)
    conn.getresponse().read()
    conn.close()
    return t0


class Mock:
    def __init__(self, binary, provider, work):
        port_file = os.path.join(work, f"{provider}.port")
        self.proc = subprocess.Popen([binary, "mock-metadata", "--provider", provider,
                                      "--listen", "127.0.0.1:0", "--port-file", port_file],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(port_file, 10):
            sys.exit(f"mock-metadata --provider {provider} did not start")
        with open(port_file) as f:
            self.port = int(f.read())
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


def trial_spotvisor(binary, mock, provider, work, n):
    d = os.path.join(work, f"sv-{provider}-{n}")
    os.makedirs(d)
    stamp = os.path.join(d, "stamp")
    with open(os.path.join(d, "child.py"), "w") as f:
        f.write(CHILD)
    job = {
        "job": {"name": "bench", "command": ["/usr/bin/python3", os.path.join(d, "child.py"), stamp]},
        "provider": {"kind": provider, "endpoint": mock.url, "poll_interval": "1s"},
        "signals": {"grace": "10s"},
        "telemetry": {"state_dir": os.path.join(d, "state")},
    }
    if provider == "azure":
        job["provider"]["azure_vm_name"] = "spotvisor-mock-vm"
    with open(os.path.join(d, "job.yaml"), "w") as f:
        json.dump(job, f)  # JSON is YAML
    control(mock.port, "clear")
    sv = subprocess.Popen([binary, "run", "--config", os.path.join(d, "job.yaml")],
                          stdout=open(os.path.join(d, "run.log"), "w"), stderr=subprocess.STDOUT)
    try:
        if not wait_for(stamp + ".ready", 10):
            sys.exit(f"trainer did not start: see {d}/run.log")
        time.sleep(0.3 + random.random())  # watcher settled; random phase within the 1 s poll
        t0 = control(mock.port, "preempt")
        if not wait_for(stamp, 10):
            sys.exit(f"no SIGTERM reached the trainer: see {d}/run.log")
        with open(stamp) as f:
            return (int(f.read()) - t0) / 1e6
    finally:
        sv.send_signal(signal.SIGTERM)
        sv.wait(30)


def trial_baseline(mock, provider, work, n):
    d = os.path.join(work, f"loop-{provider}-{n}")
    os.makedirs(d)
    stamp = os.path.join(d, "stamp")
    child = subprocess.Popen(["/usr/bin/python3", "-c", CHILD, stamp])
    control(mock.port, "clear")
    loop = None
    try:
        if not wait_for(stamp + ".ready", 10):
            sys.exit("baseline child did not start")
        loop = subprocess.Popen(["/bin/sh", "-c", BASELINE[provider].format(url=mock.url, pid=child.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.2 + random.random() * 5)  # random phase within the 5 s sleep
        t0 = control(mock.port, "preempt")
        if not wait_for(stamp, 15):
            sys.exit(f"the {provider} curl loop never signalled")
        with open(stamp) as f:
            return (int(f.read()) - t0) / 1e6
    finally:
        if loop:
            loop.wait(15)
        child.wait(5)


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def row(name, provider, values):
    return (f"| {name} | {provider} | {len(values)} | {pct(values, 50):.1f} | {pct(values, 90):.1f} | "
            f"{pct(values, 99):.1f} | {max(values):.1f} | {statistics.mean(values):.1f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--baseline-trials", type=int, default=50)
    ap.add_argument("--providers", default="aws,gcp,azure,alibaba")
    a = ap.parse_args()
    binary = os.path.abspath(os.path.join(a.build, "spotvisor"))
    if not os.access(binary, os.X_OK):
        sys.exit(f"no spotvisor binary at {binary} (build first, or pass --build DIR)")
    if not shutil.which("curl"):
        sys.exit("curl is needed for the baseline")
    work = tempfile.mkdtemp(prefix="spotvisor-notice-bench-")
    rows = []
    try:
        for provider in a.providers.split(","):
            mock = Mock(binary, provider, work)
            try:
                sv = [trial_spotvisor(binary, mock, provider, work, n) for n in range(a.trials)]
                rows.append(row("spotvisor run (poll 1s; gcp long-poll)", provider, sv))
                print(rows[-1], file=sys.stderr, flush=True)
                print(f"  {provider} trials (ms, in order): " + " ".join(f"{v:.1f}" for v in sv),
                      file=sys.stderr, flush=True)
                if a.baseline_trials > 0:
                    base = [trial_baseline(mock, provider, work, n) for n in range(a.baseline_trials)]
                    rows.append(row("curl loop, sleep 5", provider, base))
                    print(rows[-1], file=sys.stderr, flush=True)
            finally:
                mock.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| supervisor | provider | trials | p50 ms | p90 ms | p99 ms | max ms | mean ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)


main()
PY
