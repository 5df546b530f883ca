"""deploy/grafana/spotvisor.json against the real thing.

A real `spotvisor run` (the child helper as its trainer, the stand-in NVML so the GPU
families exist, the real `spotvisor mock-metadata` as its AWS metadata service, which is
told to preempt once so the notice families carry a notice and its outcome) is scraped by a
real Prometheus. Then:

- every metric name any query of the dashboard names (panels, variables, annotations) is a
  family the binary exports (`promtool check metrics` accepts the scrape first);
- every label a selector matches on or a `by (...)` groups by is one those families carry;
- every query, with the dashboard's variables filled in, is evaluated by that Prometheus's
  HTTP API: a syntax error or a type error fails;
- the JSON type-checks against Grafana's own TypeScript types (npm @grafana/schema, pinned
  in tests/grafana/package.json; tests/grafana/check_schema.mjs), and a broken copy does not.

Run by ctest (`ctest -R grafana`), after tests/grafana/setup.sh (the ctest fixture
grafana.setup). Needs: SPOTVISOR_BINARY, SPOTVISOR_CHILD_HELPER, SPOTVISOR_FAKE_NVML_DIR,
prometheus + promtool (Debian's `prometheus`), node.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "spotvisor.json"
CHECKER = Path(__file__).resolve().parent / "check_schema.mjs"

# What Grafana puts in for its built-in variables when the test evaluates a query.
BUILTIN_VARIABLES = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m"}

# PromQL words that are no metric name.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "atan2"}

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def need_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value or not os.path.exists(value):
        raise AssertionError(f"{name}={value!r}: not set or not there (ctest sets it; see tests/CMakeLists.txt)")
    return os.path.abspath(value)


def http_get(url: str, headers=None, timeout: float = 5.0) -> str:
    req = urllib.request.Request(url, headers=headers or {})
    with NO_PROXY.open(req, timeout=timeout) as resp:
        return resp.read().decode()


def wait_for(what: str, check, timeout: float = 60.0, logs=()):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    text = "\n".join(f"--- {p}:\n{Path(p).read_text(errors='replace')[-4000:]}" for p in logs if Path(p).exists())
    raise AssertionError(f"timed out waiting for {what}\n{text}")


# ---------------------------------------------------------------------------------------
# The dashboard's queries


def dashboard_queries(dash: dict):
    """(where, PromQL) of every query: panel targets (rows' panels too), query variables
    (label_values(...) as the selector it reads), annotations."""
    out = []

    def panels(ps, at):
        for i, p in enumerate(ps or []):
            where = f"{at}[{i}] {p.get('title', '')!r}"
            panels(p.get("panels"), f"{where}.panels")
            for t in p.get("targets") or []:
                out.append((f"{where} {t.get('refId')}", t["expr"]))

    panels(dash.get("panels"), "panels")
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_]\w*)\)\s*", q)
        if not m:
            raise AssertionError(f"variable {v['name']}: only label_values(selector, label) is supported, got {q!r}")
        out.append((f"variable {v['name']}", m.group(1)))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("target", {}).get("expr"):
            out.append((f"annotation {a['name']!r}", a["target"]["expr"]))
    return out


def strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def metric_names(expr: str) -> set:
    """The metric names a PromQL expression reads: identifiers that are no function or
    aggregation (followed by "("), no keyword, no label (inside {...} or a by/without/on/
    ignoring/group_x list), no duration (inside [...]) and no part of a number."""
    e = strip_strings(expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def selectors(expr: str):
    """(metric, [label names matched], {label: value} of its exact `label="value"` matchers)
    of each `metric{...}` selector."""
    out = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
        labels = re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", strip_strings(m.group(2)))
        exact = dict(re.findall(r'([a-zA-Z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"', m.group(2)))
        out.append((m.group(1), labels, exact))
    return out


def grouping_labels(expr: str) -> set:
    labels = set()
    for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", strip_strings(expr)):
        labels |= {x.strip() for x in m.group(2).split(",") if x.strip()}
    return labels


def fill_variables(expr: str, values: dict) -> str:
    def sub(m):
        name = m.group(1) or m.group(2)
        if name not in values:
            raise AssertionError(f"unknown dashboard variable ${name} in {expr!r}")
        return values[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, expr)


# ---------------------------------------------------------------------------------------
# The exported families, from the text format


def families(text: str) -> dict:
    """{family: {"type": t, "labels": set, "series": set of sample names}} of a scrape."""
    fams = {}
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            fams[m.group(1)] = {"type": m.group(2), "labels": set(), "values": {}, "series": set()}
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s", line)
        if not m:
            continue
        name = m.group(1)
        base = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in fams:
                base = name[: -len(suffix)]
        fam = fams.setdefault(base, {"type": "untyped", "labels": set(), "values": {}, "series": set()})
        fam["series"].add(name)
        for label, value in re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""):
            fam["labels"].add(label)
            fam["values"].setdefault(label, set()).add(value)
    return fams


def family_of(name: str, fams: dict):
    """The family a series name belongs to: itself, or a histogram/summary's _bucket/_sum/_count."""
    if name in fams:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and fams.get(base, {}).get("type") in ("histogram", "summary"):
            return base
    return None


class UnitChecks(unittest.TestCase):
    """The helpers above on expressions whose answers are known (they decide what the
    real checks below compare)."""

    def test_metric_names(self):
        self.assertEqual(metric_names('histogram_quantile(0.95, sum by (le) (increase(a_b_bucket{job=~"$job", x="y"}[$__range])))'),
                         {"a_b_bucket"})
        self.assertEqual(metric_names('sum(x{o="saved"}) / on (job) group_left(k) y > -1e-9 and z offset 5m < +Inf'),
                         {"x", "y", "z"})
        self.assertEqual(metric_names('max by (phase) (spotvisor_phase{a="b"}) == 1'), {"spotvisor_phase"})
        self.assertEqual(selectors('a{job=~"$job", bucket="x"} - b{le!="1"}'),
                         [("a", ["job", "bucket"], {"bucket": "x"}), ("b", ["le"], {})])
        self.assertEqual(grouping_labels('sum by (a, b) (x) / ignoring(c) y'), {"a", "b", "c"})

    def test_families(self):
        fams = families('# TYPE h histogram\nh_bucket{le="1"} 0\nh_sum 0\nh_count 0\n# TYPE c counter\nc{k="v"} 1\n')
        self.assertEqual(family_of("h_bucket", fams), "h")
        self.assertIsNone(family_of("c_bucket", fams))
        self.assertEqual(fams["c"]["labels"], {"k"})
        self.assertEqual(fams["c"]["values"], {"k": {"v"}})


# ---------------------------------------------------------------------------------------
# The real run and the real Prometheus


class Dashboard(unittest.TestCase):
    procs = []

    @classmethod
    def setUpClass(cls):
        cls.binary = need_env("SPOTVISOR_BINARY")
        child = need_env("SPOTVISOR_CHILD_HELPER")
        nvml = need_env("SPOTVISOR_FAKE_NVML_DIR")
        for tool in ("prometheus", "promtool", "node"):
            if not shutil.which(tool):
                raise AssertionError(f"{tool} is not installed (scripts/setup.sh installs it)")
        cls.dash = json.loads(DASHBOARD.read_text())
        cls.tmp = Path(tempfile.mkdtemp(prefix="spotvisor-grafana-"))
        try:
            cls._start(child, nvml)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _spawn(cls, argv, log, env=None):
        with open(cls.tmp / log, "ab") as out:
            p = subprocess.Popen(argv, cwd=cls.tmp, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env={**os.environ, **(env or {})}, start_new_session=True)
        cls.procs.append(p)
        return p

    @classmethod
    def _start(cls, child, nvml):
        tmp = cls.tmp
        cls._spawn([cls.binary, "mock-metadata", "--provider", "aws", "--listen", "127.0.0.1:0",
                    "--port-file", str(tmp / "mock.port")], "mock.log")
        mock_port = wait_for("mock-metadata's port", lambda: (tmp / "mock.port").exists() and
                             (tmp / "mock.port").read_text().strip(), logs=[tmp / "mock.log"])
        (tmp / "ckpt").mkdir()
        (tmp / "job.yaml").write_text("\n".join([
            "job:", "  name: grafana",
            f"  command: {json.dumps([child, '--mode=checkpoint', '--ckpt-dir=' + str(tmp / 'ckpt')])}",
            "  workdir: .", "  labels: {model: tiny-1}",
            "provider:", "  kind: aws", f"  endpoint: \"http://127.0.0.1:{mock_port}\"",
            "  poll_interval: 200ms", "  request_timeout: 2s",
            "signals:", "  grace: 30s",
            "checkpoints:", "  dir: ./ckpt", "  pattern: \"ckpt_step{step}\"", "  format: any",
            "telemetry:", "  state_dir: ./state", "  metrics: {listen: \"127.0.0.1:0\"}", "  gpu_interval: 1s",
            "cost:", "  node_hour: 1.5", "  budget: 100",
            "hooks:", "  on_notice: {command: [\"/bin/true\"]}", ""]))
        cls._spawn([cls.binary, "run", "--config", str(tmp / "job.yaml")], "run.log", {"LD_LIBRARY_PATH": nvml})
        logs = [tmp / "run.log", tmp / "mock.log"]

        def metrics_port():
            log = (tmp / "run.log").read_text(errors="replace")
            m = re.search(r"metrics_listening address=127\.0\.0\.1:(\d+)", log)
            return m and "event=trainer_started" in log and int(m.group(1))

        cls.metrics_port = wait_for("the run's metrics listener and trainer", metrics_port, logs=logs)
        web = free_port()
        (tmp / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n"
            f"  - job_name: spotvisor\n    static_configs: [{{targets: [\"127.0.0.1:{cls.metrics_port}\"]}}]\n")
        cls._spawn([shutil.which("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{web}"], "prometheus.log")
        cls.prom = f"http://127.0.0.1:{web}"
        logs.append(tmp / "prometheus.log")
        # Scrapes before and after the notice: increase() and rate() see it happen.
        wait_for("three scrapes of spotvisor by Prometheus",
                 lambda: cls._prom_value('count_over_time(spotvisor_up{job="spotvisor"}[1m])') >= 3, logs=logs)
        # One preemption notice: spotvisor signals the trainer, which writes its checkpoint.
        NO_PROXY.open(urllib.request.Request(f"http://127.0.0.1:{mock_port}/__spotvisor/preempt", data=b"",
                                             method="POST"), timeout=10).read()
        wait_for("the notice's checkpoint to be judged good",
                 lambda: 'spotvisor_checkpoints_total{verdict="good"} 1' in cls.scrape(), logs=logs)
        wait_for("Prometheus to see the good checkpoint",
                 lambda: cls._prom_value('spotvisor_checkpoints_total{job="spotvisor", verdict="good"}') >= 1, logs=logs)
        seen = cls._prom_value('count_over_time(spotvisor_up{job="spotvisor"}[10m])')
        wait_for("three scrapes after the notice",
                 lambda: cls._prom_value('count_over_time(spotvisor_up{job="spotvisor"}[10m])') >= seen + 3, logs=logs)
        cls.variables = {**BUILTIN_VARIABLES, "datasource": "", "job": "spotvisor",
                         "instance": f"127.0.0.1:{cls.metrics_port}"}
        cls.text = cls.scrape()
        (tmp / "metrics.txt").write_text(cls.text)

    @classmethod
    def scrape(cls) -> str:
        try:
            return http_get(f"http://127.0.0.1:{cls.metrics_port}/metrics")
        except OSError:
            return ""

    @classmethod
    def _prom_value(cls, query: str) -> float:
        try:
            res = cls.prom_query(query)
        except OSError:
            return 0
        return float(res["data"]["result"][0]["value"][1]) if res.get("data", {}).get("result") else 0

    @classmethod
    def prom_query(cls, query: str) -> dict:
        url = f"{cls.prom}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        try:
            return json.loads(http_get(url, timeout=10))
        except urllib.error.HTTPError as e:  # 400/422: the error is in the body
            body = e.read().decode(errors="replace")
            try:
                return json.loads(body)
            except json.JSONDecodeError:  # 503 "Service Unavailable" while Prometheus starts
                return {"status": "error", "errorType": f"HTTP {e.code}", "error": body.strip()[:300]}

    @classmethod
    def tearDownClass(cls):
        for p in reversed(cls.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
        cls.procs = []
        if os.environ.get("SPOTVISOR_KEEP_TMP"):
            print(f"kept {cls.tmp}")
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    # -----------------------------------------------------------------------------------

    def test_promtool_accepts_the_scrape(self):
        out = subprocess.run(["promtool", "check", "metrics"], input=self.text, capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_every_metric_a_query_names_is_exported(self):
        fams = families(self.text)
        missing, named = {}, set()
        for where, expr in dashboard_queries(self.dash):
            names = metric_names(expr)
            self.assertTrue(names, f"{where}: no metric name found in {expr!r}")
            for name in names:
                self.assertTrue(name.startswith("spotvisor_"), f"{where}: {name!r} in {expr!r} is no spotvisor metric")
                named.add(name)
                if not family_of(name, fams):
                    missing.setdefault(name, []).append(where)
        self.assertFalse(missing, "metrics the dashboard queries but `spotvisor run` does not export:\n" +
                         "\n".join(f"  {n} (in {', '.join(w)})" for n, w in sorted(missing.items())))
        # The scrape has the data the panels are about, so the check above had something to match.
        self.assertIn('spotvisor_notices_total{provider="aws",kind="', self.text)
        self.assertIn("spotvisor_gpu_utilization_ratio{", self.text)

    def test_every_label_a_query_uses_is_on_its_metrics(self):
        fams = families(self.text)
        target = {"job", "instance"}  # put on by Prometheus, not by the exporter
        problems = []
        for where, expr in dashboard_queries(self.dash):
            found = [family_of(n, fams) for n in metric_names(expr)]
            labels_here = set().union(*(fams[f]["labels"] for f in found if f)) | target
            for fam in filter(None, found):
                if not fams[fam]["series"]:
                    problems.append(f"{where}: the run exported no series of {fam}: its labels cannot be checked")
            for metric, labels, exact in selectors(expr):
                fam = family_of(metric, fams)
                if not fam:
                    continue  # reported by the test above
                have = fams[fam]["labels"] | target | ({"le"} if metric.endswith("_bucket") else set())
                problems += [f"{where}: {metric} has no label {x!r}" for x in labels if x not in have]
                # An exact value (outcome="saved", bound="low") is one the run exported.
                problems += [f"{where}: {metric}{{{x}=\"{v}\"}}: the run exported only {sorted(fams[fam]['values'][x])}"
                             for x, v in exact.items() if x in fams[fam]["values"] and v not in fams[fam]["values"][x]]
            if metric_names(expr) and all(found):
                problems += [f"{where}: no metric of {expr!r} has a label {x!r}" for x in grouping_labels(expr)
                             if x not in labels_here | {"le"}]
        self.assertFalse(problems, "\n".join(problems))

    def test_every_query_evaluates_in_prometheus(self):
        failures = []
        for where, expr in dashboard_queries(self.dash):
            res = self.prom_query(fill_variables(expr, self.variables))
            if res.get("status") != "success":
                failures.append(f"{where}: {res.get('errorType')}: {res.get('error')}\n    {expr}")
        self.assertFalse(failures, "\n".join(failures))
        # And a wrong one is refused, so the loop above can fail.
        self.assertEqual(self.prom_query('sum by (phase) spotvisor_phase{job="x"')["status"], "error")

    def test_queries_read_the_run(self):
        """The selectors with the variables filled in find the run's series (the variables'
        job and instance labels are the ones Prometheus puts on)."""
        for query in ('spotvisor_up{job=~"$job", instance=~"$instance"}',
                      'sum by (provider, kind) (increase(spotvisor_notices_total{job=~"$job", instance=~"$instance"}[$__range]))'):
            res = self.prom_query(fill_variables(query, self.variables))
            self.assertTrue(res["data"]["result"], f"{query}: {res}")

    def test_every_query_finds_data(self):
        """Each query returns series for this run (a notice saved, GPUs, a hook, a budget),
        but for the few whose data this run cannot have, each with its reason: an empty
        query is a wrong label value, a filter that never matches, a metric renamed."""
        empty_by_design = {
            ("Steps per second", "A"): "throughput is unknown until two checkpoints (-1, filtered out)",
            ("Restarts by reason", "A"): "no restart in this run (only increases > 0 are drawn)",
            ("Cost estimate and budget", "B"): "the high end is +Inf while a cost component has no price",
        }
        empty = []
        for p in all_panels(self.dash["panels"]):
            for t in p.get("targets") or []:
                res = self.prom_query(fill_variables(t["expr"], self.variables))
                has_data = bool(res.get("data", {}).get("result"))
                key = (p["title"], t["refId"])
                if has_data == (key in empty_by_design):
                    empty.append(f"{p['title']!r} {t['refId']}: " + (
                        "data, though listed as empty by design" if has_data else f"no data: {t['expr']}"))
        self.assertFalse(empty, "\n".join(empty))

    def test_every_query_follows_the_variables(self):
        problems = []
        for where, expr in dashboard_queries(self.dash):
            if where.startswith("variable"):
                continue
            for metric, labels, _ in selectors(expr):
                if "job" not in labels or "instance" not in labels:
                    problems.append(f"{where}: {metric} is not filtered by job=~\"$job\", instance=~\"$instance\"")
        for p in all_panels(self.dash["panels"]):
            if p["type"] == "row":
                continue
            for t in p.get("targets", []):
                if t.get("datasource") != {"type": "prometheus", "uid": "${datasource}"}:
                    problems.append(f"panel {p['title']!r}: target {t.get('refId')} does not use ${{datasource}}")
        variables = {v["name"]: v for v in self.dash["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        self.assertEqual({"job", "instance"} - set(variables), set())
        self.assertFalse(problems, "\n".join(problems))

    def test_layout(self):
        ids = [p["id"] for p in all_panels(self.dash["panels"])]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        boxes = []
        for p in all_panels(self.dash["panels"]):
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            for title, o in boxes:  # no two panels on the same cells
                apart = (g["x"] + g["w"] <= o["x"] or o["x"] + o["w"] <= g["x"] or
                         g["y"] + g["h"] <= o["y"] or o["y"] + o["h"] <= g["y"])
                self.assertTrue(apart, f"{p['title']!r} overlaps {title!r}")
            boxes.append((p["title"], g))
        self.assertEqual(self.dash["uid"], "spotvisor")

    def test_grafana_schema(self):
        ok = subprocess.run(["node", str(CHECKER), str(DASHBOARD)], capture_output=True, text=True)
        self.assertEqual(ok.returncode, 0, ok.stdout + ok.stderr)
        self.assertIn("valid against @grafana/schema", ok.stdout)
        # Broken copies fail, each for its reason: a misspelt panel key, an unknown enum
        # value in a plugin's options, a wrong type at the dashboard level.
        broken = json.loads(DASHBOARD.read_text())
        ts = next(p for p in all_panels(broken["panels"]) if p["type"] == "timeseries")
        ts["gridpos"] = ts.pop("gridPos")
        ts["options"]["legend"]["displayMode"] = "sideways"
        broken["schemaVersion"] = "42"
        path = self.tmp / "broken.json"
        path.write_text(json.dumps(broken))
        bad = subprocess.run(["node", str(CHECKER), str(path)], capture_output=True, text=True)
        self.assertEqual(bad.returncode, 1, bad.stdout + bad.stderr)
        for needle in ("'\"gridpos\"' does not exist", '"sideways"', "schemaVersion"):
            self.assertIn(needle, bad.stderr)


def all_panels(panels):
    for p in panels or []:
        yield p
        yield from all_panels(p.get("panels"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    unittest.main()
