"""What must hold after the load, so a fast number from a gateway that skipped Redis never
passes for a result. Each check appends to the row's verification line and may fail it.

The row's load writes the start of the line (requests and answers, or decisions); the checks
named in bench/rows.py follow in order. Counts are over every run (warm-ups and half load
included); the in-flight slack is one request per connection per run, decided (and charged)
while the load generator stopped and dropped its answer.
"""

from __future__ import annotations

from typing import List


class Verdict:
    """One row's verification line and its failures."""

    def __init__(self, ctx, row):
        self.ctx = ctx
        self.row = row
        self.line = ""
        self.fails: List[str] = []
        self._metrics = None

    def say(self, text: str) -> None:
        self.line += text

    def fail(self, text: str) -> None:
        self.fails.append(text)

    @property
    def metrics(self) -> dict:
        """The gateway's /metrics, read once after the load."""
        if self._metrics is None:
            self._metrics = self.row.front.metrics(self.ctx, self.row)
        return self._metrics

    @property
    def slack(self) -> int:
        return self.row.load.connections(self.ctx.k) * self.ctx.tot[self.row.name]["runs"]

    def print(self) -> None:
        print(f"  {self.line}")
        for f in self.fails:
            print(f"    FAIL: {f}")


class Decided:
    """slidegate's /metrics: nothing denied on a store error, nothing blocked, delayed or
    shadowed, fail-open within 0.1 % of the requests (a WARN below that), and the limit
    reached only where it is meant to be: `deny=True` for a row of 1 per hour, where exactly one
    request is allowed and the deny cache answers the rest."""

    def __init__(self, deny: bool = False):
        self.deny = deny

    def check(self, ctx, row, v: Verdict) -> None:
        m, t = v.metrics, row.name
        completed = ctx.tot[t]["completed"]
        v.say(f"; /metrics: allowed={m['allowed']} rejected={m['rejected']} (deny cache {m['cache_hits']})"
              f" blocked={m['blocked']} delayed={m['delayed']} store_error_allowed={m['store_error_allowed']}"
              f" store_error_denied={m['store_error_denied']} store_errors={m['store_errors']}")
        if m["store_error_denied"]:
            v.fail(f"{t}: {m['store_error_denied']} requests denied on store errors")
        if m["blocked"] + m["delayed"] + m["shadow_rejected"]:
            v.fail(f"{t}: blocked/delayed/shadow decisions on a reject route")
        judge_fail_open(v, t, completed)
        if self.deny:
            if m["allowed"] != 1:
                v.fail(f"{t}: slidegate allowed {m['allowed']} requests; the limit is 1 per hour")
            if m["cache_hits"] <= 0:
                v.fail(f"{t}: the deny cache answered no request")
        else:
            if m["allowed"] <= 0:
                v.fail(f"{t}: slidegate allowed no requests")
            if m["rejected"]:
                v.fail(f"{t}: {m['rejected']} requests hit the (unreachable) limit")


def judge_fail_open(v: Verdict, t: str, completed: int) -> None:
    """A decision slower than store.timeout fails open: a few under saturation pass with a
    WARN, more than 0.1% of the `completed` requests (or decisions) fail the run."""
    m = v.metrics
    if m["store_error_allowed"] or m["store_errors"]:
        if m["store_error_allowed"] * 1000 <= completed and m["store_errors"] * 1000 <= completed:
            v.say(f" (WARN: {m['store_error_allowed']} decisions failed open after a store timeout)")
        else:
            v.fail(f"{t}: {m['store_error_allowed']} requests failed open, {m['store_errors']} store errors"
                   " (over 0.1%)")


class AdmittedAll:
    """The allowed decisions match the 2xx answers (within the in-flight slack)."""

    def check(self, ctx, row, v: Verdict) -> None:
        m, ok2xx, sl = v.metrics, ctx.tot[row.name]["ok2xx"], v.slack
        if not (m["allowed"] + m["store_error_allowed"] >= ok2xx and m["allowed"] <= ok2xx + sl):
            v.fail(f"{row.name}: /metrics allowed={m['allowed']} does not match {ok2xx} 2xx answers"
                   f" (in-flight slack {sl})")


class FailedLogins:
    """A route counting only 401s: every attempt admitted; the upstream's 4xx match the
    clients' non-2xx; refunds plus failures match the admitted attempts; the failed share is
    BENCH_LOGIN_FAIL_SHARE within 5 points."""

    def check(self, ctx, row, v: Verdict) -> None:
        m, tot, sl, t = v.metrics, ctx.tot[row.name], v.slack, row.name
        completed, failed = tot["completed"], tot["completed"] - tot["ok2xx"]
        allowed, up4xx, refunds = m["allowed"], m["upstream_4xx"], m["refunds"]
        v.say(f"; {failed} answered 401 (upstream 4xx in /metrics: {up4xx}), {refunds} refunded")
        if not (allowed + m["store_error_allowed"] >= completed and allowed <= completed + sl):
            v.fail(f"{t}: /metrics allowed={allowed} does not match {completed} attempts (in-flight slack {sl})")
        if not failed <= up4xx <= failed + sl:
            v.fail(f"{t}: the upstream answered {up4xx} 4xx, the clients saw {failed} non-2xx (slack {sl})")
        if not (refunds + up4xx + sl >= allowed and refunds + up4xx <= allowed + sl):
            v.fail(f"{t}: {refunds} refunds and {up4xx} failures for {allowed} admitted attempts (slack {sl})")
        share = float(ctx.k.fail_share)
        if completed >= 1000 and not share - 0.05 < failed / completed < share + 0.05:
            v.fail(f"{t}: {failed} of {completed} attempts failed; BENCH_LOGIN_FAIL_SHARE is {ctx.k.fail_share}")


class LeaversAdmitted:
    """wrk's attempts and the leaving clients' are all admitted (within the in-flight slack)."""

    def check(self, ctx, row, v: Verdict) -> None:
        m, tot, sl = v.metrics, ctx.tot[row.name], v.slack
        completed, left = tot["completed"], tot["left"]
        v.say(f"; {left} attempts left before their answer ({tot['left_first']} answered first),"
              f" {m['refunds']} refunded")
        if not (m["allowed"] + m["store_error_allowed"] + sl >= completed + left
                and m["allowed"] <= completed + left + sl):
            v.fail(f"{row.name}: /metrics allowed={m['allowed']} does not match {completed} + {left} attempts"
                   f" (slack {sl})")


class CountedOrRefunded:
    """Every admitted attempt is counted (an entry in Redis) or refunded, never neither; more
    entries only by decisions that failed open after store.timeout but still ran in Redis."""

    def check(self, ctx, row, v: Verdict) -> None:
        m = v.metrics
        keys, entries = ctx.redis.zcard_sum(row.front.key_pattern(row))
        allowed, refunds, fail_open = m["allowed"], m["refunds"], m["store_error_allowed"]
        v.say(f"; Redis: {keys} key(s), {entries} entries + {refunds} refunds = {entries + refunds}"
              f" for {allowed} admitted")
        if not allowed <= entries + refunds <= allowed + fail_open:
            v.fail(f"{row.name}: {entries} entries + {refunds} refunds for {allowed} admitted attempts"
                   f" (fail-open slack {fail_open})")


class EntryPerCharge:
    """Redis holds one sorted-set entry per kept charge (the window keeps every entry of a run):
    `kept="allowed"`, or `"failed"` where only the failed attempts keep theirs (the 401s). More
    entries only by requests cut off while Redis decided them, or decisions that failed open
    after store.timeout but still ran in Redis."""

    def __init__(self, kept: str = "allowed"):
        self.kept = kept

    def check(self, ctx, row, v: Verdict) -> None:
        m, sl = v.metrics, v.slack
        keys, entries = ctx.redis.zcard_sum(row.front.key_pattern(row))
        kept = m["allowed"] if self.kept == "allowed" else m["upstream_4xx"]
        v.say(f"; Redis: {keys} key(s), {entries} entries (ZCARD)")
        if entries > kept:
            v.say(f", {entries - kept} charged for requests cut off or failed open")
        if not (entries + sl >= kept and entries <= kept + m["store_error_allowed"] + sl):
            v.fail(f"{row.name}: Redis holds {entries} entries for {kept} kept charges"
                   f" (slack {m['store_error_allowed'] + sl})")


class CallsBound:
    """In every measured run, the decisions slidegate says it made in Redis are at most Redis's
    decision calls times the row's connections (a call carries at most one decision per open one):
    a gateway that skipped Redis fails it. Nothing assumes one call per request."""

    def check(self, ctx, row, v: Verdict) -> None:
        conns = row.load.connections(ctx.k)
        for r, run in sorted(ctx.runs[row.name].items()):
            if run["decisions"] > run["evalsha"] * conns:
                v.fail(f"{row.name} round {r}: {run['decisions']} decisions in Redis but only {run['evalsha']}"
                       f" EVALSHA calls for {conns} connections")


class PeerEntries:
    """The peer: its sorted sets hold between the 2xx answers and that plus the in-flight slack,
    and its NGINX error log has no error."""

    def check(self, ctx, row, v: Verdict) -> None:
        ok2xx, sl = ctx.tot[row.name]["ok2xx"], v.slack
        keys, entries = ctx.redis.zcard_sum(row.front.key_pattern(row))
        log_path = row.front.error_log(ctx)
        lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
        errors = sum("[error]" in line for line in lines)
        v.say(f"; Redis: {keys} key(s), {entries} entries (ZCARD), {entries - ok2xx} charged for requests"
              f" cut off at the end of a run; NGINX error log: {errors} error(s)")
        if not ok2xx <= entries <= ok2xx + sl:
            v.fail(f"{row.name}: Redis holds {entries} entries for {ok2xx} allowed requests (in-flight slack {sl})")
        if errors:
            v.fail(f"{row.name}: errors in the peer's NGINX error log")


class ExactEntries:
    """The load generator waited for every call: Redis holds exactly one entry per allowed
    decision (`note` says how the keys hold them)."""

    def __init__(self, note: str = ""):
        self.note = note

    def check(self, ctx, row, v: Verdict) -> None:
        keys, entries = ctx.redis.zcard_sum(row.front.key_pattern(row))
        allowed = ctx.tot[row.name]["allowed"]
        # a decision that failed open (allowed by on_error after a store timeout) may or may not
        # have been charged: its call may have run in Redis after the gateway stopped waiting
        failed_open = v.metrics["store_error_allowed"]
        v.say(f"; Redis: {keys} keys{self.note}, ZCARD {entries}")
        judge_fail_open(v, row.name, allowed)
        if not allowed - failed_open <= entries <= allowed:
            v.fail(f"{row.name}: Redis holds {entries} entries for {allowed} allowed decisions"
                   f" ({failed_open} of them failed open)")


class SlotsFreed:
    """A concurrency row: once the load has stopped, Redis holds no lease of an attempt in flight
    beyond the connections cut off at the end (every slot was freed when its answer ended)."""

    def check(self, ctx, row, v: Verdict) -> None:
        keys, leases = ctx.redis.zcard_sum(row.front.key_pattern(row))
        v.say(f"; Redis: {keys} set(s) of slots in flight, {leases} lease(s) left")
        if leases > v.slack:
            v.fail(f"{row.name}: {leases} leases left in Redis after the load (slack {v.slack})")


class CostsSettled:
    """A cost_from row: every allowed answer was charged what it stated (`per_answer` units each,
    slidegate_cost_settled_total), within the in-flight slack."""

    def __init__(self, per_answer: int):
        self.per_answer = per_answer

    def check(self, ctx, row, v: Verdict) -> None:
        m, sl = v.metrics, v.slack
        settled, allowed = m["cost_settled"], m["allowed"]
        v.say(f"; cost settled {settled} for {allowed} answers")
        if not (allowed - sl) * self.per_answer <= settled <= allowed * self.per_answer:
            v.fail(f"{row.name}: {settled} units settled for {allowed} answers of {self.per_answer}"
                   f" (in-flight slack {sl})")
