#!/usr/bin/env bash
# Checks that every query in a Grafana dashboard uses only slidegate's metrics (the contract of
# README.md, "Metrics"; src/metrics.rs registers them) with their real labels and label values,
# and that every panel query follows the dashboard's `instance` variable.
#
#   dashboards/check.sh [DASHBOARD.json]      (default: slidegate.json next to this script)
#   dashboards/check.sh RULES.yml             (Prometheus rule file: every `expr` is checked
#                                              the same way; `up` is allowed too)
#
# With python3 it parses every PromQL expression (panel targets and template-variable queries)
# and checks: metric names (histograms only through _bucket/_sum/_count), label names in
# selectors and in by/without/on/ignoring clauses, fixed label values (decision, status, kind,
# result, backend, mode), that every contract metric is used somewhere, that every metric
# selector of a panel carries instance=~"$instance", that the `route` and `instance` variables
# exist, and that every panel and query uses the provisioned datasource uid. It also checks the
# contract itself against src/metrics.rs (when the script sits in the repository): the
# slidegate_* names registered there and the values of decision, kind, status and mode. Without
# python3 it falls back to grep and checks metric names only. Exit 0 when everything passes, 1
# otherwise. dashboards/live_check.sh runs the same queries against a real Prometheus.

set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dashboard="${1:-$here/slidegate.json}"
datasource_uid="slidegate-prometheus"

if [[ ! -f "$dashboard" ]]; then
    echo "check.sh: no such file: $dashboard" >&2
    exit 1
fi

# The contract. Keep in sync with README.md ("Metrics") and src/metrics.rs, the truth.
counters="slidegate_requests_total slidegate_limit_exceeded_total slidegate_store_errors_total
slidegate_deny_cache_hits_total slidegate_upstream_requests_total slidegate_config_reloads_total
slidegate_outcome_refunds_total slidegate_outcome_resets_total slidegate_blocks_started_total
slidegate_store_evicted_keys_total slidegate_cost_settled_total slidegate_cost_overage_total"
histograms="slidegate_limit_utilization_ratio slidegate_decision_duration_seconds
slidegate_upstream_duration_seconds"
gauges="slidegate_build_info slidegate_delay_waiting slidegate_deny_cache_entries
slidegate_store_replicas process_cpu_seconds_total
process_resident_memory_bytes process_virtual_memory_bytes process_open_fds process_max_fds
process_start_time_seconds process_threads"

if ! command -v python3 >/dev/null 2>&1; then
    if [[ $dashboard == *.yml || $dashboard == *.yaml ]]; then
        echo "check.sh: python3 not found; rule files are checked by promtool only" >&2
        exit 0
    fi
    echo "check.sh: python3 not found; checking metric names with grep only" >&2
    allowed=" "
    for m in $counters $gauges; do allowed+="$m "; done
    for m in $histograms; do allowed+="${m}_bucket ${m}_sum ${m}_count "; done
    status=0
    found=0
    # Every slidegate_* word in an "expr" or "query"/"definition" string.
    while IFS= read -r name; do
        found=1
        if [[ "$allowed" != *" $name "* ]]; then
            echo "FAIL: unknown metric $name" >&2
            status=1
        else
            echo "ok: $name"
        fi
    done < <(grep -E '"(expr|query|definition)"[[:space:]]*:' "$dashboard" \
        | grep -oE '(slidegate|process)_[A-Za-z0-9_:]*' | sort -u)
    if [[ $found -eq 0 ]]; then
        echo "FAIL: no slidegate metric found in any query" >&2
        status=1
    fi
    # Anything else that looks like a metric selector (name followed by `{` or `[`).
    others="$(grep -E '"expr"[[:space:]]*:' "$dashboard" \
        | grep -oE '[A-Za-z_:][A-Za-z0-9_:]*[[:space:]]*[{[]' | grep -vE '^(slidegate|process)_' || true)"
    if [[ -n "$others" ]]; then
        echo "FAIL: selectors of other metrics: $others" >&2
        status=1
    fi
    [[ $status -eq 0 ]] && echo "PASS (grep fallback: metric names only)"
    exit $status
fi

exec python3 - "$dashboard" "$datasource_uid" "$here/../src/metrics.rs" <<'PY'
import ast
import json
import re
import sys

path, ds_uid, metrics_rs = sys.argv[1], sys.argv[2], sys.argv[3]

# metric -> {label: allowed values or None (any value, e.g. config names)}
ROUTE = {"route": None}
COUNTERS = {
    "slidegate_requests_total": {**ROUTE, "decision": {
        "allowed", "rejected", "delayed", "blocked", "shadow_rejected",
        "store_error_allowed", "store_error_denied", "exempt", "bad_request"}},
    "slidegate_limit_exceeded_total": {**ROUTE, "limit": None, "mode": {"enforced", "shadow"}},
    "slidegate_store_errors_total": {"kind": {"timeout", "connection", "script", "full", "other"}},
    "slidegate_deny_cache_hits_total": dict(ROUTE),
    "slidegate_upstream_requests_total": {**ROUTE, "status": {"2xx", "3xx", "4xx", "5xx", "error"}},
    "slidegate_config_reloads_total": {"result": {"success", "failure"}},
    # Outcome counting and blocks (count_status / reset_status / on_exceed = "block"), per limit.
    "slidegate_outcome_refunds_total": {**ROUTE, "limit": None},
    "slidegate_outcome_resets_total": {**ROUTE, "limit": None},
    "slidegate_blocks_started_total": {**ROUTE, "limit": None},
    # Redis's own evictions (INFO stats evicted_keys), read when scraped.
    "slidegate_store_evicted_keys_total": {},
    # Costs read from the answer (cost_from): what each answer settled to, and what it went over.
    "slidegate_cost_settled_total": {**ROUTE, "limit": None},
    "slidegate_cost_overage_total": {**ROUTE, "limit": None},
}
HISTOGRAMS = {
    "slidegate_limit_utilization_ratio": {**ROUTE, "limit": None},
    "slidegate_decision_duration_seconds": {**ROUTE, "backend": {"redis", "memory", "local"}},
    "slidegate_upstream_duration_seconds": dict(ROUTE),
    "slidegate_rls_duration_seconds": dict(ROUTE),
}
GAUGES = {
    "slidegate_build_info": {"version": None},
    "slidegate_delay_waiting": dict(ROUTE),
    "slidegate_deny_cache_entries": {},
    # store.replica_acks: each Redis master's replicas as last seen, and the setting itself.
    "slidegate_store_replicas": {"node": None},
    "slidegate_store_replica_acks": {},
}
# Registered and documented, but not in the contract's table of metrics (see the dashboard check).
BEYOND_THE_CONTRACT = ("slidegate_store_replica_acks", "slidegate_rls_duration_seconds")
# The standard process collector (CPU, memory, descriptors): queried with job="slidegate".
PROCESS = {name: {} for name in (
    "process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
    "process_open_fds", "process_max_fds", "process_start_time_seconds", "process_threads")}
METRICS = {**COUNTERS, **GAUGES, **PROCESS}
for base, labels in HISTOGRAMS.items():
    METRICS[base + "_bucket"] = {**labels, "le": None}
    METRICS[base + "_sum"] = dict(labels)
    METRICS[base + "_count"] = dict(labels)
# Labels Prometheus adds at scrape time; always fine to match or group on.
TARGET_LABELS = {"job", "instance"}

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_sum", "histogram_stddev", "histogram_stdvar", "holt_winters", "hour", "idelta",
    "increase", "irate", "label_join", "label_replace", "ln", "log2", "log10", "minute", "month",
    "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt",
    "time", "timestamp", "vector", "year", "avg_over_time", "min_over_time", "max_over_time",
    "sum_over_time", "count_over_time", "quantile_over_time", "stddev_over_time",
    "stdvar_over_time", "last_over_time", "present_over_time", "acos", "acosh", "asin", "asinh",
    "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh", "deg", "rad", "pi", "start", "end",
}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
# Grafana template-variable query functions whose last argument is a label name.
GRAFANA_LABEL_FUNCS = {"label_values"}

TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<var>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<dur>\d+(?:ms|[smhdwy])(?![A-Za-z0-9_:]))
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=])
  | (?P<punct>[(){},@])
""", re.X)


def tokenize(expr):
    out, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot parse at {expr[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        out.append((kind, m.group()))
    return out


def unquote(s):
    if s[0] == "`":
        return s[1:-1]
    return ast.literal_eval(s)


def check_expr(expr, where, errors, used, require_instance):
    try:
        toks = tokenize(expr)
    except ValueError as e:
        errors.append(f"{where}: {e}")
        return
    metrics_here, grouping_labels, unknown_here = set(), [], False
    i = 0
    label_func_depth = []  # paren depths at which a label_values(...) call is open
    depth = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "punct" and text == "(":
            depth += 1
        elif kind == "punct" and text == ")":
            if label_func_depth and label_func_depth[-1] == depth:
                label_func_depth.pop()
            depth -= 1
        elif kind == "punct" and text == "{":
            # A selector without a name ({__name__=...}) is not allowed: name metrics explicitly.
            errors.append(f"{where}: selector without a metric name")
        elif kind == "ident":
            if text in GROUPING:
                if nxt == ("punct", "("):
                    j = i + 2
                    while j < len(toks) and toks[j] != ("punct", ")"):
                        if toks[j][0] == "ident":
                            grouping_labels.append(toks[j][1])
                        j += 1
                    i = j + 1
                    continue
            elif text in KEYWORDS or text in AGGREGATIONS or (text in FUNCTIONS and nxt == ("punct", "(")):
                pass
            elif text in GRAFANA_LABEL_FUNCS and nxt == ("punct", "("):
                label_func_depth.append(depth + 1)
            elif (label_func_depth and label_func_depth[-1] == depth
                  and toks[i - 1] == ("punct", ",") and nxt == ("punct", ")")):
                grouping_labels.append(text)  # label_values(metric, LABEL)
            else:
                name = text
                if name not in METRICS:
                    if name in HISTOGRAMS:
                        errors.append(f"{where}: histogram {name} must be queried as _bucket, _sum or _count")
                    else:
                        errors.append(f"{where}: unknown metric {name}")
                    labels = None  # already reported; skip its label checks
                    unknown_here = True
                else:
                    labels = METRICS[name]
                    metrics_here.add(name)
                    used.add(re.sub(r"_(bucket|sum|count)$", "", name) if name not in COUNTERS else name)
                if require_instance and labels is not None and not follows_instance(toks, i):
                    errors.append(f"{where}: {name} is not filtered by instance=~\"$instance\"")
                if nxt == ("punct", "{"):
                    j = i + 2
                    while j < len(toks) and toks[j] != ("punct", "}"):
                        if toks[j][0] == "ident":
                            label = toks[j][1]
                            op = toks[j + 1][1] if j + 1 < len(toks) else None
                            val = toks[j + 2] if j + 2 < len(toks) else (None, None)
                            if labels is None:
                                pass
                            elif label not in labels and label not in TARGET_LABELS and label != "__name__":
                                errors.append(f"{where}: {name} has no label {label!r} (has {sorted(labels)})")
                            elif labels.get(label) and val[0] == "str":
                                check_value(where, name, label, op, unquote(val[1]), labels[label], errors)
                            j += 3
                        else:
                            j += 1
                    i = j + 1
                    continue
        i += 1
    allowed_grouping = set(TARGET_LABELS)
    for m in metrics_here:
        allowed_grouping |= set(METRICS[m])
    for label in grouping_labels:
        if not unknown_here and label not in allowed_grouping:
            errors.append(f"{where}: groups or selects on label {label!r}, which none of "
                          f"{sorted(metrics_here) or 'its metrics'} has")


def follows_instance(toks, i):
    """Whether the selector of the metric at token i carries instance=~"$instance"."""
    if i + 1 >= len(toks) or toks[i + 1] != ("punct", "{"):
        return False
    j = i + 2
    while j + 2 < len(toks) and toks[j] != ("punct", "}"):
        if toks[j] == ("ident", "instance") and toks[j + 1] == ("op", "=~") \
                and toks[j + 2][0] == "str" and unquote(toks[j + 2][1]) == "$instance":
            return True
        j += 1
    return False


def check_value(where, metric, label, op, value, allowed, errors):
    if "$" in value:
        return  # a template variable
    if op in ("=", "!="):
        if value not in allowed:
            errors.append(f"{where}: {metric}{{{label}{op}{value!r}}}: not a value of {label} {sorted(allowed)}")
    elif op in ("=~", "!~"):
        if re.fullmatch(r"[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*", value):
            for alt in value.split("|"):
                if alt not in allowed:
                    errors.append(f"{where}: {metric}{{{label}{op}{value!r}}}: {alt!r} is not a value of {label} {sorted(allowed)}")
        elif not any(re.fullmatch(value, v) for v in allowed):
            errors.append(f"{where}: {metric}{{{label}{op}{value!r}}}: matches no value of {label}")


def walk(node, where, found):
    """Yields (where, key, value) for every datasource and query string."""
    if isinstance(node, dict):
        title = node.get("title") or node.get("name")
        here = f"{where} > {title}" if title and ("type" in node or "targets" in node) else where
        if "refId" in node:
            here = f"{here} [{node['refId']}]"
        for k, v in node.items():
            if k in ("expr", "definition") and isinstance(v, str):
                found.append((here, k, v))
            elif k == "query" and isinstance(v, str) and node.get("type") in ("query", None):
                found.append((here, k, v))
            elif k == "datasource":
                found.append((here, k, v))
            walk(v, here, found)
    elif isinstance(node, list):
        for item in node:
            walk(item, where, found)


def rule_exprs(text):
    """Yields (line number, expression) for every `expr:` of a Prometheus rule file, inline or
    as a YAML block scalar (`expr: |` and the more-indented lines after it)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:-\s+)?expr:\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, value = len(m.group(1)), m.group(2).strip()
        start = i + 1
        if value in ("|", ">", "|-", ">-", "|+", ">+"):
            body = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                body.append(lines[i])
                i += 1
            yield start, "\n".join(body)
        else:
            if value[:1] in ("'", '"'):
                value = value[1:-1]
            yield start, value
            i += 1




def contract_drift():
    """Differences between the contract above and src/metrics.rs (the truth), when it is there:
    the registered slidegate_* names and the fixed values of decision, kind, status and mode."""
    import glob
    import os
    folder = os.path.splitext(metrics_rs)[0]  # src/metrics/: the registry and the labels
    try:
        src = ""
        for name in [metrics_rs] + sorted(glob.glob(os.path.join(folder, "*.rs"))):
            with open(name, encoding="utf-8") as f:
                src += f.read()
    except OSError:
        return []  # checking a dashboard outside the repository
    out = []
    names = set(re.findall(r'"(slidegate_[a-z_]+)"', src))
    contract = {n for n in METRICS if n.startswith("slidegate_")
                and not re.search(r"_(bucket|sum|count)$", n)} | set(HISTOGRAMS)
    for n in sorted(names - contract):
        out.append(f"src/metrics.rs registers {n}, which the contract in check.sh lacks")
    for n in sorted(contract - names):
        out.append(f"the contract in check.sh has {n}, which src/metrics.rs does not register")

    def values(pattern):
        m = re.search(pattern, src, re.S)
        return set(re.findall(r'"([a-z0-9_]+)"', m.group(1))) if m else None

    for metric, label, got in (
        ("slidegate_requests_total", "decision",
         values(r"fn as_str\(self\) -> &'static str \{(.*?)\n    \}")),
        ("slidegate_store_errors_total", "kind", values(r"STORE_ERROR_KINDS[^=]*=\s*\[(.*?)\]")),
        ("slidegate_upstream_requests_total", "status", values(r"UPSTREAM_STATUSES[^=]*=\s*\[(.*?)\]")),
        ("slidegate_limit_exceeded_total", "mode", values(r"EXCEED_MODES[^=]*=\s*\[(.*?)\]")),
    ):
        if got is None:
            out.append(f"src/metrics.rs: cannot find the values of {metric}{{{label}}}")
        elif got != METRICS[metric][label]:
            out.append(f"{metric}{{{label}}}: src/metrics.rs has {sorted(got)}, "
                       f"the contract in check.sh {sorted(METRICS[metric][label])}")
    return out


drift = contract_drift()
if drift:
    for e in drift:
        print(f"FAIL: {e}", file=sys.stderr)
    sys.exit(1)

if path.endswith((".yml", ".yaml")):
    METRICS["up"] = {}
    with open(path, encoding="utf-8") as f:
        rules = f.read()
    errors, used, n = [], set(), 0
    for line, expr in rule_exprs(rules):
        n += 1
        check_expr(expr, f"{path}:{line}", errors, used, require_instance=False)
    if n == 0:
        errors.append(f"{path}: no expr found")
    for e in errors:
        print(f"FAIL: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"PASS: {n} rule expressions use only the documented metrics, labels and values")
    sys.exit(0)

# Exported beyond the contract's table: a rule file may read them (the replica-acks alert needs
# the setting), a dashboard may not, so that every panel works on the contract's names alone.
for name in BEYOND_THE_CONTRACT:
    GAUGES.pop(name, None)
    HISTOGRAMS.pop(name, None)
    for series in (name, name + "_bucket", name + "_sum", name + "_count"):
        METRICS.pop(series, None)

try:
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
except (OSError, ValueError) as e:
    print(f"FAIL: {path}: {e}", file=sys.stderr)
    sys.exit(1)

errors, used, found = [], set(), []
walk(dashboard, "dashboard", found)
exprs = 0
for where, key, value in found:
    if key == "datasource":
        if isinstance(value, dict):
            uid, typ = value.get("uid"), value.get("type")
        else:
            uid, typ = value, None
        if typ == "grafana" or uid in ("-- Grafana --", "grafana"):
            continue
        if uid != ds_uid:
            errors.append(f"{where}: datasource {value!r}, expected uid {ds_uid!r}")
        continue
    if not value.strip():
        continue
    exprs += 1
    check_expr(value, f"{where} ({key})", errors, used, require_instance=(key == "expr"))

variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
for name, expected in (("route", "label_values(slidegate_requests_total, route)"),
                       ("instance", "label_values(slidegate_build_info, instance)")):
    variable = variables.get(name)
    if variable is None:
        errors.append(f"no `{name}` template variable")
        continue
    q = variable.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    if re.sub(r"\s+", "", q or "") != re.sub(r"\s+", "", expected):
        errors.append(f"`{name}` variable query is {q!r}, expected {expected}")

for metric in sorted(set(COUNTERS) | set(HISTOGRAMS) | set(GAUGES)):
    if metric not in used:
        errors.append(f"metric {metric} is not used by any panel")

if exprs == 0:
    errors.append("no queries found")
for e in errors:
    print(f"FAIL: {e}", file=sys.stderr)
if errors:
    sys.exit(1)
print(f"PASS: {exprs} queries, {len(used & (set(COUNTERS) | set(HISTOGRAMS) | set(GAUGES)))} of "
      f"{len(COUNTERS) + len(HISTOGRAMS) + len(GAUGES)} metrics used, every panel follows $instance, "
      f"all datasources uid {ds_uid}")
PY
