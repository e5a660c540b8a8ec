"""The BENCH_* knobs, read from the environment once and checked before anything starts.

An empty variable counts as unset. `--quick` only changes the defaults of the run length, the
warm-up and the rounds; a knob set in the environment still wins. bench/README.md lists them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional, Tuple

from .log import die


def _assignments(name: str) -> Tuple[Tuple[str, str], ...]:
    """`NAME=value NAME2=value2` (space-separated) as pairs; a word without `=` ends the run."""
    pairs = []
    for word in (_raw(name) or "").split():
        key, eq, value = word.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            die(f"{name}: '{word}' is not NAME=value")
        pairs.append((key, value))
    return tuple(pairs)


def _raw(name: str) -> Optional[str]:
    value = os.environ.get(name, "")
    return value if value != "" else None


def _whole(name: str, default: Optional[int]) -> Optional[int]:
    raw = _raw(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]+", raw):
        die(f"{name} must be a whole number, got '{raw}'")
    return int(raw)


@dataclass(frozen=True)
class Knobs:
    """Every knob of a run, by its meaning (the environment names are in `from_env`)."""

    quick: bool
    seconds: int
    warmup: int
    rounds: int
    threads: int
    conns: int
    path: str
    users: int
    half: bool
    half_targets: Optional[str]  # None: the rows' defaults
    half_keyed_targets: Optional[str]
    half_seconds: int
    half_rate: str
    hey_conns: int
    batch_keys: int
    batch_bodies: int
    batch_conns: int
    rb_clients: int
    rb_pipeline: int
    rls_conns: int
    rls_in_flight: int
    gw_workers: Optional[int]
    nginx_workers: int
    peer_workers: int
    haproxy_threads: Optional[int]
    store_timeout: str
    phones: int
    otp_normalize: bool
    fail_share: str
    leavers: int
    leave_ms: int
    baseline_bin: Optional[str]
    baseline_env: Tuple[Tuple[str, str], ...]
    targets: Optional[str]

    @classmethod
    def from_env(cls, quick: bool) -> "Knobs":
        """Reads and checks every knob; a bad one ends the run with its name."""
        seconds = _whole("BENCH_SECONDS", 3 if quick else 10)
        conns = _whole("BENCH_CONNS", 32)
        k = cls(
            quick=quick,
            seconds=seconds,
            warmup=_whole("BENCH_WARMUP", 1 if quick else 2),
            rounds=_whole("BENCH_ROUNDS", 1 if quick else 2),
            threads=_whole("BENCH_THREADS", 1),
            conns=conns,
            path=_raw("BENCH_PATH") or "/bench",
            users=_whole("BENCH_USERS", 100000),
            half=_whole("BENCH_HALF", 1) != 0,
            half_targets=_raw("BENCH_HALF_TARGETS"),
            half_keyed_targets=_raw("BENCH_HALF_KEYED_TARGETS"),
            half_seconds=_whole("BENCH_HALF_SECONDS", seconds),
            half_rate=_raw("BENCH_HALF_RATE") or "own",
            hey_conns=_whole("BENCH_HEY_CONNS", conns),
            batch_keys=_whole("BENCH_BATCH_KEYS", 10000),
            batch_bodies=_whole("BENCH_BATCH_BODIES", 10),
            batch_conns=_whole("BENCH_BATCH_CONNS", 2),
            rb_clients=_whole("BENCH_RB_CLIENTS", 50),
            rb_pipeline=_whole("BENCH_RB_PIPELINE", 16),
            rls_conns=_whole("BENCH_RLS_CONNS", 4),
            rls_in_flight=_whole("BENCH_RLS_IN_FLIGHT", 16),
            gw_workers=_whole("BENCH_GW_WORKERS", None),
            nginx_workers=_whole("BENCH_NGINX_WORKERS", 1),
            peer_workers=_whole("BENCH_PEER_WORKERS", 2),
            haproxy_threads=_whole("BENCH_HAPROXY_THREADS", None),
            store_timeout=_raw("BENCH_STORE_TIMEOUT") or "50ms",
            phones=_whole("BENCH_OTP_PHONES", 100000),
            otp_normalize=_whole("BENCH_OTP_NORMALIZE", 0) == 1,
            fail_share=_raw("BENCH_LOGIN_FAIL_SHARE") or "0.5",
            leavers=_whole("BENCH_LEAVERS", conns // 4),
            leave_ms=_whole("BENCH_LEAVE_MS", 20),
            baseline_bin=_raw("BENCH_BASELINE_BIN"),
            baseline_env=_assignments("BENCH_BASELINE_ENV"),
            targets=_raw("BENCH_TARGETS"),
        )
        k._check()
        if k.baseline_bin:
            object.__setattr__(k, "baseline_bin", os.path.abspath(k.baseline_bin))
        return k

    def _check(self) -> None:
        if not (self.seconds >= 1 and self.rounds >= 1 and self.threads >= 1 and self.conns >= self.threads):
            die("need BENCH_SECONDS >= 1, BENCH_ROUNDS >= 1, BENCH_CONNS >= BENCH_THREADS >= 1")
        if not 1 <= self.batch_keys <= 10000:
            die("BENCH_BATCH_KEYS must be 1..10000 (the API's maximum)")
        if min(self.batch_bodies, self.batch_conns, self.hey_conns, self.users) < 1:
            die("batch/hey/users knobs must be >= 1")
        if self.half_rate not in ("own", "common"):
            die("BENCH_HALF_RATE must be 'own' or 'common'")
        if not 1 <= self.phones <= 99999999:
            die("BENCH_OTP_PHONES must be 1..99999999")
        if not re.fullmatch(r"0(\.[0-9]+)?|1(\.0+)?", self.fail_share):
            die(f"BENCH_LOGIN_FAIL_SHARE must be a share between 0 and 1, got '{self.fail_share}'")
        if self.conns - self.leavers < self.threads:
            die("BENCH_LEAVERS must leave at least BENCH_THREADS of the BENCH_CONNS connections to wrk")
        if self.baseline_env and not self.baseline_bin:
            die("BENCH_BASELINE_ENV needs BENCH_BASELINE_BIN (this build's target/release/slidegate for an A/B of a switch)")
        if self.baseline_bin and not (os.path.isfile(self.baseline_bin) and os.access(self.baseline_bin, os.X_OK)):
            die(f"BENCH_BASELINE_BIN: not an executable file: {self.baseline_bin}")
        self._check_keyspaces()

    def _check_keyspaces(self) -> None:
        # The limits are never reached only while no key gets near 10,000 decisions in its
        # window. One Redis decides at most ~200,000 requests/s (its CPU per decision is >= 5 us),
        # so over the T seconds a keyed row is loaded (warm-ups, measured runs, half load) a key
        # of N gets about 200000 * T / N at worst on average: keep that at a fifth of the limit.
        loaded_s = self.rounds * (self.warmup + self.seconds) + self.half_seconds
        for name, keys in (("USERS", self.users), ("OTP_PHONES", self.phones)):
            if 200000 * loaded_s // keys > 2000:
                die(f"BENCH_{name}={keys} keys are too few for {loaded_s} s of load: a key could reach"
                    f" its limit (need >= {100 * loaded_s})")
        batch_s = self.rounds * (self.warmup + self.seconds)
        if 200000 * batch_s // (self.batch_keys * self.batch_bodies) > 2000:
            die("BENCH_BATCH_KEYS x BENCH_BATCH_BODIES keys are too few for the batch's load: a key"
                " could reach its limit")
