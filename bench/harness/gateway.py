"""slidegate as a row's front: its generated config (route, limits, store), start and /metrics.

Every slidegate row is its own process with its own config and its own `store.key_prefix`
(`sgb-<row>`), so rows never share Redis keys. A -base twin (A/B) runs the same route under
the same name on BENCH_BASELINE_BIN; its config uses only settings an older build knows.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from dataclasses import dataclass
from typing import Optional, Tuple

from .fronts import Front
from .log import die, log
from .procs import wait_http, wait_port


@dataclass(frozen=True)
class Limit:
    """One `[[routes.limits]]` table."""

    name: str
    limit: int
    window: str  # empty for a limit without one (algorithm = "concurrency")
    algorithm: str = "sliding_log"
    extra: str = ""  # one more line, e.g. 'count_status = [401]'

    def toml(self) -> str:
        text = f'\n  [[routes.limits]]\n  name = "{self.name}"\n  limit = {self.limit}\n'
        text += f'  window = "{self.window}"\n' if self.window else ""
        text += f'  algorithm = "{self.algorithm}"\n'
        return text + (f"  {self.extra}\n" if self.extra else "")


@dataclass(frozen=True)
class Route:
    """One `[[routes]]` table to the demo upstream; its name is the row's."""

    path: str = "/*"
    key: str = ""  # a TOML value, e.g. '["header:X-User"]'; empty: no key
    limits: Tuple[Limit, ...] = ()
    extra: str = ""  # one more line, e.g. 'methods = ["POST"]'

    def toml(self, name: str) -> str:
        text = f'[[routes]]\nname = "{name}"\npath = "{self.path}"\nupstream = "demo"\n'
        text += f"key = {self.key}\n" if self.key else ""
        text += f"{self.extra}\n" if self.extra else ""
        return text + "".join(limit.toml() for limit in self.limits)


@dataclass(frozen=True)
class RlsService:
    """The `[rls]` section: Envoy's rate-limit service on a listener of its own (`rls`), with
    its limits from a YAML file the bench writes."""

    limits_yaml: str
    listener: str = "rls"

    def toml(self, ctx, row) -> str:
        port = ctx.listen[row.name][self.listener] = ctx.ports.pick()
        path = ctx.tmp / f"{row.name}-limits.yaml"
        path.write_text(self.limits_yaml)
        return f'[rls]\nlisten = "127.0.0.1:{port}"\nconfig = "{path}"\n'


@dataclass(frozen=True)
class ExtAuthzService:
    """The `[ext_authz]` section: Envoy's external authorization (Check) on a listener of its
    own (`ext_authz`), deciding the row's route."""

    listener: str = "ext_authz"

    def toml(self, ctx, row) -> str:
        port = ctx.listen[row.name][self.listener] = ctx.ports.pick()
        return f'[ext_authz]\nlisten = "127.0.0.1:{port}"\n'


def parse_metrics(text: str) -> dict:
    """The counters the checks read from slidegate's /metrics, summed over their labels."""
    m = dict.fromkeys(("allowed", "rejected", "blocked", "delayed", "shadow_rejected", "store_error_allowed",
                       "store_error_denied", "cache_hits", "store_errors", "upstream_4xx", "refunds",
                       "cost_settled"), 0)
    for line in text.splitlines():
        if not line.startswith("slidegate_"):
            continue
        value = int(float(line.rsplit(None, 1)[1]))
        if line.startswith("slidegate_requests_total{"):
            decision = re.search(r'decision="([a-z_]+)"', line)
            if decision and decision.group(1) in m:
                m[decision.group(1)] += value
        elif line.startswith("slidegate_deny_cache_hits_total{"):
            m["cache_hits"] += value
        elif line.startswith("slidegate_store_errors_total{"):
            m["store_errors"] += value
        elif line.startswith("slidegate_upstream_requests_total{") and 'status="4xx"' in line:
            m["upstream_4xx"] += value
        elif line.startswith("slidegate_outcome_refunds_total{"):
            m["refunds"] += value
        elif line.startswith("slidegate_cost_settled_total{"):
            m["cost_settled"] += value
    return m


def store_decisions(m: dict) -> int:
    """Decisions that reached the store: allowed + rejected + blocked, minus the rejections
    the deny cache answered."""
    return m["allowed"] + m["rejected"] + m["blocked"] - m["cache_hits"]


class Gateway(Front):
    """slidegate with one generated route (or none), a store, and optional extra services."""

    def __init__(self, route: Optional[Route] = None, store: str = "redis", replica_acks: Optional[int] = None,
                 services: tuple = (), binary: Optional[str] = None):
        self.route = route
        self.store = store  # "redis" or "memory"
        self.replica_acks = replica_acks
        self.services = services  # e.g. RlsService(...)
        self.binary = binary  # None: this build's target/release/slidegate

    @property
    def uses_redis(self) -> bool:
        return self.store == "redis"

    @property
    def needs_replica(self) -> bool:
        return bool(self.replica_acks)

    def on_binary(self, binary: str) -> "Gateway":
        """The same front on another slidegate binary (the A/B baseline)."""
        return Gateway(self.route, self.store, self.replica_acks, self.services, binary)

    def process(self, row):
        return f"gw-{row.name}"

    def label(self, k) -> str:
        return "slidegate (baseline)" if self.binary else "slidegate"

    def key_pattern(self, row) -> str:
        """Every Redis key of the row (its own key prefix)."""
        return f"sgb-{row.name}:*"

    def metrics(self, ctx, row) -> dict:
        url = f"http://127.0.0.1:{ctx.listen[row.name]['admin']}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return parse_metrics(reply.read().decode())
        except OSError as e:
            die(f"cannot read /metrics of slidegate ({row.name}): {e}")

    def decisions(self, window, done: int) -> int:
        if not self.uses_redis:
            return 0
        return store_decisions(window.metrics_after) - store_decisions(window.metrics_before)

    def _store_toml(self, ctx, row) -> str:
        if self.store == "memory":
            return 'backend = "memory"'
        text = (f'backend = "redis"\nurl = "redis://127.0.0.1:{ctx.redis.port}"\n'
                f'timeout = "{ctx.k.store_timeout}"\nkey_prefix = "sgb-{row.name}"')
        return text + (f"\nreplica_acks = {self.replica_acks}" if self.replica_acks else "")

    def config(self, ctx, row) -> str:
        """The generated TOML of the row's slidegate."""
        listen = ctx.listen[row.name]
        body = self.route.toml(row.route_name) if self.route else ""
        body += "".join(service.toml(ctx, row) for service in self.services)
        return f"""# Generated by bench/bench.py for the {row.name} target.
[server]
listen = "127.0.0.1:{listen['http']}"

[admin]
listen = "127.0.0.1:{listen['admin']}"
token_env = "SLIDEGATE_ADMIN_TOKEN"

[store]
{self._store_toml(ctx, row)}

[upstreams.demo]
url = "http://127.0.0.1:{ctx.upstream_port}"

{body}"""

    def start(self, ctx, rows) -> None:
        (row,) = rows
        listen = ctx.listen[row.name]
        listen["http"], listen["admin"] = ctx.ports.pick(), ctx.ports.pick()
        binary = self.binary or str(ctx.gateway_bin)
        path = ctx.tmp / f"gw-{row.name}.toml"
        path.write_text(self.config(ctx, row))
        check = subprocess.run([binary, "check", "--config", str(path)], capture_output=True, text=True)
        if check.returncode != 0:
            die(f"generated slidegate config for {row.name} is invalid ({binary} check):\n"
                f"{(check.stdout + check.stderr).strip()}")
        log(f"starting slidegate ({row.name}) on 127.0.0.1:{listen['http']} (admin 127.0.0.1:{listen['admin']})")
        env = {k: v for k, v in os.environ.items()
               if k not in ("SLIDEGATE_REDIS_URL", "SLIDEGATE_CONFIG", "SLIDEGATE_LOG_FORMAT")}
        env.update(SLIDEGATE_LOG="warn", SLIDEGATE_ADMIN_TOKEN=ctx.token)
        if ctx.k.gw_workers is not None:
            env["TOKIO_WORKER_THREADS"] = str(ctx.k.gw_workers)
        if self.binary:
            env.update(ctx.k.baseline_env)  # BENCH_BASELINE_ENV: the -base twin's switches
        proc = ctx.sup.service(f"gw-{row.name}", [binary, "--config", str(path)], env)
        ctx.cpu.add(f"gw-{row.name}", [proc.pid])
        wait_http(f"slidegate ({row.name}) admin", f"http://127.0.0.1:{listen['admin']}/readyz", proc)
        # Readiness through the proxy only where a request costs no limit state.
        if self.route and not self.route.limits:
            wait_http(f"slidegate ({row.name})", f"http://127.0.0.1:{listen['http']}{ctx.k.path}", proc)
        else:
            wait_port(f"slidegate ({row.name})", listen["http"], proc)
        for service in self.services:
            wait_port(f"slidegate ({row.name}) {service.listener}", listen[service.listener], proc)
