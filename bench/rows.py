"""The rows of bench/run.sh: one declarative entry each, in the order they run and print.

A row names its front (what runs: NGINX, the peer, HAProxy, or a slidegate with the route
given here), its load, its anchor (the ratio's denominator), what its answers must be, the
checks that must hold after the load, its goals, and whether it also runs at half load and
on the A/B baseline. bench/README.md ("Adding a row") walks through adding one.
"""

from harness.fronts import Haproxy, Nginx, NoFront, Peer
from harness.gateway import ExtAuthzService, Gateway, Limit, Route, RlsService
from harness.goals import GatewayCpu, HalfP99, Info, InfoByCpu, InfoHalfP99, Rate, RedisCpu, RedisCpuOf
from harness.half import Hey, Paced, PacedCalls
from harness.loads import Batch, Calls, RedisBenchmark
from harness.checks import (AdmittedAll, CallsBound, CostsSettled, CountedOrRefunded, Decided, EntryPerCharge,
                            ExactEntries, FailedLogins, LeaversAdmitted, PeerEntries, SlotsFreed)
from harness.row import ONE_2XX, SOME_401, Row
from harness.wrk import Wrk

# Limits never reached, within the bounds the config enforces (a sliding_log limit holds at most
# 10,000; the counter's and gcra's limit * window in microseconds stay below 2^53; windows are
# 1 ms .. 366 d):
# - one hot key: 10,000 per 10 ms is a million requests a second on ONE key, five times what one
#   Redis can decide (>= 5 us of its CPU per decision) and far beyond a proxied request here; a
#   log of 10,000 in an hour would be reached within a second. The set then holds only the last
#   10 ms of entries, so Redis cannot show every allowed decision as an entry: those rows are
#   checked against the decision calls instead (CallsBound).
# - 100,000 keys: 10,000 per hour per key, so every allowed decision of the log stays in its
#   sorted set for the entry check; a key gets about 1/100,000 of the load (BENCH_USERS is
#   checked against the length of the run).
HOT_NEVER = Limit("never", 10000, "10ms")
KEY_NEVER = Limit("never", 10000, "1h")
HOT_KEY = '["route"]'
USER_KEY = '["header:X-User"]'

# What every slidegate row with limits must show in its /metrics and Redis.
DECIDED_IN_REDIS = (Decided(), AdmittedAll(), CallsBound())
ENTRY_PER_DECISION = (Decided(), AdmittedAll(), EntryPerCharge(), CallsBound())

# The demo upstream's /sse answers: 20 events, the last but one stating 25 tokens (bench/sse.lua).
SSE_EVENTS = 20
SSE_TOKENS = SSE_EVENTS + 5
# A token limit never reached by those answers: 25 tokens a request, at most a million a second.
TOKENS_NEVER = Limit("tokens", 1000000, "1s", "sliding_window_counter",
                     extra='cost_from = "sse:usage.total_tokens"')
# The same limit without a cost read from the answer: what deciding alone costs on those answers.
TOKENS_FIXED = Limit("tokens", 1000000, "1s", "sliding_window_counter")

RLS_LIMITS = """domain: bench
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10000, name: never }
"""


def table(k):
    """Every row, given the knobs (a few rows' routes follow one)."""
    otp_key = ('[{ part = "json:phone", normalize = "phone", region = "ID" }]' if k.otp_normalize
               else '["json:phone"]')
    return [
        # ---- the anchors
        Row("nginx", "plain NGINX reverse proxy, BENCH_NGINX_WORKERS workers (the proxy-cost anchor)",
            Nginx(), Wrk(), half=Hey()),
        Row("peer", "NGINX + Lua + Redis built by hand: one EVALSHA per request, one hot key",
            Peer("peer-hot", keyed=False), Wrk(), checks=(PeerEntries(),), half=Hey(vs="nginx")),
        Row("peer-keys", "the same peer keyed by a random X-User among BENCH_USERS",
            Peer("peer-keys", keyed=True), Wrk("random_user.lua"), checks=(PeerEntries(),),
            half=Paced(default=False)),
        Row("haproxy-deny", "HAProxy stick-table deny: 429 to every request after the first (the deny anchor)",
            Haproxy(), Wrk(), answers=ONE_2XX),
        # ---- slidegate on the proxy path
        Row("proxy", "slidegate, a route without limits",
            Gateway(Route(), store="memory"), Wrk(), anchor="nginx", ab=True,
            goals=(Rate(1.0),)),
        Row("memory", "slidegate, memory store, one hot key, 10,000 per 10 ms (never reached)",
            Gateway(Route(key=HOT_KEY, limits=(HOT_NEVER,)), store="memory"), Wrk(), anchor="nginx", ab=True,
            checks=(Decided(), AdmittedAll()), goals=(Rate(0.95),)),
        Row("redis-hot", "slidegate, Redis, one hot key, the same limit",
            Gateway(Route(key=HOT_KEY, limits=(HOT_NEVER,))), Wrk(), anchor="peer", ab=True,
            checks=DECIDED_IN_REDIS, half=Hey(vs="nginx"),
            goals=(Rate(0.7, of="nginx"), GatewayCpu(of="proxy", plus=6), RedisCpu(7), Info("peer"),
                   HalfP99(of="nginx", plus_ms=1))),
        Row("redis-keys", "slidegate, Redis, X-User keys (BENCH_USERS), 10,000 per hour per key",
            Gateway(Route(key=USER_KEY, limits=(KEY_NEVER,))), Wrk("random_user.lua"), anchor="peer-keys",
            ab=True, checks=ENTRY_PER_DECISION, half=Paced(),
            goals=(Rate(0.6, of="nginx"), GatewayCpu(of="nginx", times=1.3), RedisCpu(10), Info("peer-keys"))),
        Row("redis-keys-acks", "redis-keys with store.replica_acks = 1 (puts a replica behind Redis for the run)",
            Gateway(Route(key=USER_KEY, limits=(KEY_NEVER,)), replica_acks=1), Wrk("random_user.lua"),
            anchor="redis-keys", checks=ENTRY_PER_DECISION, goals=(Rate(0.9),), default=False),
        Row("deny", "slidegate, Redis, 1 per hour on one key: every later request a 429 from the deny cache",
            Gateway(Route(key=HOT_KEY, limits=(Limit("one", 1, "1h"),))), Wrk(), anchor="haproxy-deny",
            ab=True, answers=ONE_2XX, checks=(Decided(deny=True), EntryPerCharge(), CallsBound()), goals=(Rate(1.0),)),
        Row("otp-body", "slidegate, Redis, keyed on the JSON body member json:phone (bench/otp_body.lua)",
            Gateway(Route(key=otp_key, limits=(Limit("per-phone", 10000, "1h"),), extra='methods = ["POST"]')),
            Wrk("otp_body.lua"), anchor="redis-keys", checks=ENTRY_PER_DECISION, half=Paced(),
            goals=(Rate(0.9), InfoHalfP99("redis-keys"))),
        Row("login-outcome", "slidegate, Redis, count_status = [401]: half the attempts fail, the rest refunded",
            Gateway(Route(key=USER_KEY, limits=(Limit("failed-logins", 10000, "1h", extra="count_status = [401]"),))),
            Wrk("login.lua"), anchor="redis-keys", answers=SOME_401,
            checks=(Decided(), FailedLogins(), EntryPerCharge(kept="failed"), CallsBound()),
            half=Paced(vs="redis-keys", default=False), goals=(Rate(0.9),)),
        Row("login-leave", "login-outcome with BENCH_LEAVERS clients leaving before their answer (bench/leaver.py)",
            Gateway(Route(key=USER_KEY, limits=(Limit("failed-logins", 10000, "1h", extra="count_status = [401]"),))),
            Wrk("login.lua", leavers=True), anchor="redis-keys", answers=SOME_401,
            checks=(Decided(), LeaversAdmitted(), CountedOrRefunded(), CallsBound()), goals=(Info("redis-keys"),)),
        Row("concurrency", "slidegate, Redis, one hot key, 64 attempts in flight, 32 connections",
            Gateway(Route(key=HOT_KEY, limits=(Limit("inflight", 64, "", "concurrency"),))), Wrk(conns=32),
            anchor="redis-hot", checks=(Decided(), AdmittedAll(), CallsBound(), SlotsFreed()),
            goals=(Rate(0.9),)),
        Row("proxy-sse", "proxy on the demo upstream's streamed answers: 20 server-sent events each",
            Gateway(Route(), store="memory"), Wrk("sse.lua"), anchor="nginx"),
        Row("limit-sse", "proxy-sse with the same token limit charged 1 a request (no cost read)",
            Gateway(Route(key=HOT_KEY, limits=(TOKENS_FIXED,)), store="memory"), Wrk("sse.lua"),
            anchor="proxy-sse", checks=(Decided(), AdmittedAll()),
            goals=(Info("proxy-sse"), InfoByCpu("proxy-sse"))),
        Row("cost-sse", "proxy-sse with a token limit whose cost each answer's last usage event states",
            Gateway(Route(key=HOT_KEY, limits=(TOKENS_NEVER,)), store="memory"), Wrk("sse.lua"),
            anchor="proxy-sse", checks=(Decided(), AdmittedAll(), CostsSettled(SSE_TOKENS)),
            goals=(Rate(0.9), Info("limit-sse"), InfoByCpu("proxy-sse"), InfoByCpu("limit-sse"))),
        Row("gcra", "redis-keys with a gcra limit (10,000 per hour) instead of the sliding log",
            Gateway(Route(key=USER_KEY, limits=(Limit("never", 10000, "1h", "gcra"),))), Wrk("random_user.lua"),
            anchor="redis-keys", checks=DECIDED_IN_REDIS, half=Paced(vs="redis-keys", default=False),
            goals=(Info("redis-keys"),)),
        # ---- decisions without proxying
        Row("batch", "POST /v1/decisions, BENCH_BATCH_KEYS distinct keys per call, two limits (a day, a week)",
            Gateway(Route(path="/batch/*", limits=(Limit("day", 10000, "1d"), Limit("week", 10000, "7d")))),
            Batch(), anchor="redis-benchmark", companion="redis-benchmark",
            checks=(ExactEntries(" (one sorted set per key for both limits)"),), goals=(Rate(1.0),)),
        Row("redis-benchmark", "redis-benchmark -P 16: EVALSHA of the two-limit hand-made script (runs with batch)",
            NoFront(), RedisBenchmark(), companion="batch"),
        Row("rls", "Envoy's rate-limit service: gRPC ShouldRateLimit, one descriptor per call, BENCH_USERS keys",
            Gateway(services=(RlsService(RLS_LIMITS),)),
            Calls("rls_load", "bench/rls/load.rs", listener="rls", what="ShouldRateLimit, one descriptor per call"),
            anchor="redis-keys", checks=(ExactEntries(),), half=PacedCalls(), goals=(Rate(1.5), HalfP99(below_ms=5))),
        # Envoy's ext_authz with the body: otp-body's route and bodies, asked by Check (every call
        # a stream id of its own, so none is answered from another's decision).
        Row("ext-authz", "Envoy's ext_authz: gRPC Check with a 200-byte JSON body keyed by phone, BENCH_USERS phones",
            Gateway(Route(key=otp_key, limits=(Limit("per-phone", 10000, "1h"),), extra='methods = ["POST"]'),
                    services=(ExtAuthzService(),)),
            Calls("rls_load", "bench/rls/load.rs", listener="ext_authz",
                  what="Check, a 200-byte JSON body per call", service="check"),
            anchor="otp-body", checks=(ExactEntries(),), goals=(Rate(1.3), RedisCpuOf("otp-body", 1.1))),
    ]
