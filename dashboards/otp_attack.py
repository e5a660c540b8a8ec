#!/usr/bin/env python3
"""Reruns an OTP-pumping attack on the demo and draws what the dashboard shows of it.

    dashboards/otp_attack.py [OUT.svg]        (default: dashboards/otp_attack.svg)

It starts, on free loopback ports: a private redis-server (the embedded memory store when none
is installed), the demo upstream, slidegate with the OTP recipe (examples/otp.toml, only its
ports, store URL and upstream URL replaced) and a real Prometheus (Debian's `prometheus`
package) scraping slidegate every second. Then, for about two minutes:

  - 0 s .. end:   legitimate users: one OTP request a second, each for a number of its own
                  (another operator's range), from an address of its own;
  - 20 s .. 80 s: a bot pumps SMS to one operator's range (+62 812...): 25 requests a second,
                  each number asked 4 times, every request from a new address (behind the
                  trusted proxy, in X-Forwarded-For), and one request in ten with a body
                  that holds no phone number at all.

The recipe refuses each number's 4th request (per-phone, 3 per 10 minutes), then, once the
range had its 500 an hour, every request for it (per-operator); a body without a number is
400 `missing_key`. The legitimate users pass throughout. The script then asks Prometheus for
the dashboard's own queries (read from dashboards/slidegate.json by panel title; `$route` and
`$instance` are `.*`, `$__rate_interval` is 10s) over the run, and draws them as an SVG with
nothing but the standard library: "Request rate by decision" (Traffic row), "429s by limit"
(Limits row, refusals only) and "Bad requests per minute by route" (Abuse row). Finally it
prints what an on-call person sees: `GET /admin/blocked?route=otp-send`.

Environment: SLIDEGATE_BIN, DEMO_UPSTREAM_BIN (default: `cargo build --release --bins`, then
target/release/), PROMETHEUS_BIN (default: prometheus on PATH). Every process it starts is
stopped on exit.
"""

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOKEN = "otp-attack-demo-token"
SECRET = "otp-attack-demo-secret-0123456789abcdef"
RATE_INTERVAL = "10s"
ATTACK = (20, 80)  # seconds after the start
END = 110
PANELS = [
    ("Request rate by decision", "requests per second", {}),
    ("429s by limit (shadow breaches apart)", "429s per second", {"B"}),  # shadow: none here
    ("Bad requests per minute by route", "bad requests per minute", {}),
]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_for(url, what, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except Exception:
            time.sleep(0.1)
    sys.exit(f"otp_attack: {what} did not come up ({url})")


def binaries():
    slidegate = os.environ.get("SLIDEGATE_BIN")
    demo = os.environ.get("DEMO_UPSTREAM_BIN")
    if not (slidegate and demo):
        subprocess.run(["cargo", "build", "--release", "--bins"], cwd=ROOT, check=True)
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        slidegate = slidegate or os.path.join(target, "release", "slidegate")
        demo = demo or os.path.join(target, "release", "demo-upstream")
    return slidegate, demo


def recipe(work, gw, admin, up, redis_port):
    """examples/otp.toml with only its ports, store URL and upstream URL replaced."""
    with open(os.path.join(ROOT, "examples", "otp.toml"), encoding="utf-8") as f:
        text = f.read()
    swaps = [
        ('listen = "127.0.0.1:8080"', f'listen = "127.0.0.1:{gw}"'),
        ('listen = "127.0.0.1:9091"', f'listen = "127.0.0.1:{admin}"'),
        ('url = "http://127.0.0.1:9000"', f'url = "http://127.0.0.1:{up}"'),
    ]
    if redis_port:
        swaps.append(('url = "redis://127.0.0.1:6390"', f'url = "redis://127.0.0.1:{redis_port}"'))
    else:
        swaps.append(('backend = "redis"', 'backend = "memory"'))
    for old, new in swaps:
        if text.count(old) != 1:
            sys.exit(f"otp_attack: examples/otp.toml no longer has exactly one `{old}`")
        text = text.replace(old, new)
    path = os.path.join(work, "otp.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def send(gw, phone, ip):
    body = json.dumps({"phone": phone}) if phone else json.dumps({"note": "no number"})
    req = urllib.request.Request(
        f"http://127.0.0.1:{gw}/api/otp/send",
        data=body.encode(),
        method="POST",
        headers={"content-type": "application/json", "x-forwarded-for": ip},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 0


def traffic(gw, started, stop):
    """Legitimate users throughout, the bot during ATTACK; returns the statuses by sender."""
    seen = {"user": {}, "bot": {}}
    lock = threading.Lock()

    def note(who, status):
        with lock:
            seen[who][status] = seen[who].get(status, 0) + 1

    def users():
        n = 0
        while not stop.is_set():
            n += 1
            note("user", send(gw, f"+62813{n:07d}", f"198.51.100.{n % 250 + 1}"))
            time.sleep(1.0)

    def bot():
        rng = random.Random(812)
        n = 0
        while time.time() < started + ATTACK[0] and not stop.is_set():
            time.sleep(0.05)
        tick = time.time()
        while time.time() < started + ATTACK[1] and not stop.is_set():
            ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
            phone = None if n % 10 == 9 else f"+62812{n // 4:07d}"
            note("bot", send(gw, phone, ip))
            n += 1
            tick += 1 / 25
            time.sleep(max(0.0, tick - time.time()))

    threads = [threading.Thread(target=users), threading.Thread(target=bot)]
    for t in threads:
        t.start()
    return threads, seen


def dashboard_queries():
    """The targets of the panels drawn, by panel title, variables substituted."""
    with open(os.path.join(HERE, "slidegate.json"), encoding="utf-8") as f:
        panels = json.load(f)["panels"]
    out = []
    for title, unit, skip in PANELS:
        panel = next(p for p in panels if p.get("title") == title)
        targets = []
        for t in panel["targets"]:
            if t.get("refId") in skip:
                continue
            expr = (t["expr"].replace("$route", ".*").replace("$instance", ".*")
                    .replace("$__rate_interval", RATE_INTERVAL))
            targets.append((expr, t.get("legendFormat", "")))
        out.append((title, unit, targets))
    return out


def query_range(prom, expr, start, end):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": "1"})
    with urllib.request.urlopen(f"http://127.0.0.1:{prom}/api/v1/query_range?{q}") as r:
        answer = json.load(r)
    if answer.get("status") != "success":
        sys.exit(f"otp_attack: query failed: {expr}: {answer}")
    return answer["data"]["result"]


def legend(fmt, labels):
    text = fmt
    for k, v in labels.items():
        text = text.replace("{{" + k + "}}", v)
    return text or "value"


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
# The same colour for a series wherever it shows.
NAMED = {
    "allowed": "#2ca02c", "rejected": "#d62728", "bad_request": "#ff7f0e", "blocked": "#9467bd",
    "otp-send / per-phone refused": "#1f77b4", "otp-send / per-operator refused": "#d62728",
    "otp-send / per-ip refused": "#8c564b", "otp-send": "#ff7f0e",
}


def nice_max(v):
    if v <= 0:
        return 1
    step = 10 ** len(str(int(v))) / 10
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * step:
            return m * step
    return 10 * step


def capped_at(panels):
    """When the operator's range ran out (its first refusal by per-operator), if it did."""
    for _, _, series in panels:
        for name, pts in series:
            if "per-operator" in name:
                return next((t for t, v in pts if v > 0), None)
    return None


def draw(panels, start, out):
    width, panel_h, left, right, top = 960, 230, 70, 230, 40
    height = top + len(panels) * (panel_h + 50)
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        '<text x="10" y="22" font-size="15" font-weight="bold">An OTP-pumping attack on '
        'the demo (examples/otp.toml), as Prometheus recorded it: the dashboard\'s queries</text>',
    ]
    capped = capped_at(panels)
    plot_w = width - left - right
    for n, (title, unit, series) in enumerate(panels):
        y0 = top + n * (panel_h + 50) + 20
        ymax = nice_max(max((v for _, pts in series for _, v in pts), default=0))
        x = lambda t: left + plot_w * t / END  # noqa: E731
        y = lambda v: y0 + panel_h - panel_h * v / ymax  # noqa: E731
        svg.append(f'<text x="{left}" y="{y0 - 6}" font-weight="bold">{escape(title)}</text>')
        svg.append(f'<rect x="{x(ATTACK[0]):.1f}" y="{y0}" width="{x(ATTACK[1]) - x(ATTACK[0]):.1f}" '
                   f'height="{panel_h}" fill="#fbe3e3"/>')
        svg.append(f'<text x="{x(ATTACK[0]) + 4:.1f}" y="{y0 + 14}" fill="#a33">bot pumping '
                   '+62 812...</text>')
        for i in range(5):
            v = ymax * i / 4
            svg.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                       'stroke="#ddd"/>')
            svg.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        if capped is not None:
            svg.append(f'<line x1="{x(capped):.1f}" x2="{x(capped):.1f}" y1="{y0}" '
                       f'y2="{y0 + panel_h}" stroke="#555" stroke-dasharray="4 3"/>')
            if n == 0:
                svg.append(f'<text x="{x(capped) + 4:.1f}" y="{y0 + 30}" fill="#333">+62 812 '
                           'had its 500 an hour (per-operator)</text>')
        for t in range(0, END + 1, 10):
            svg.append(f'<text x="{x(t):.1f}" y="{y0 + panel_h + 16}" text-anchor="middle">{t} s</text>')
        svg.append(f'<text x="14" y="{y0 + panel_h / 2:.0f}" transform="rotate(-90 14 '
                   f'{y0 + panel_h / 2:.0f})" text-anchor="middle">{escape(unit)}</text>')
        for i, (name, pts) in enumerate(series):
            colour = NAMED.get(name, COLOURS[i % len(COLOURS)])
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
            ly = y0 + 14 + i * 18
            svg.append(f'<line x1="{left + plot_w + 14}" x2="{left + plot_w + 34}" y1="{ly - 4}" '
                       f'y2="{ly - 4}" stroke="{colour}" stroke-width="3"/>')
            svg.append(f'<text x="{left + plot_w + 40}" y="{ly}">{escape(name)}</text>')
    svg.append("</svg>")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(svg) + "\n")


def admin_call(admin, method, path):
    req = urllib.request.Request(f"http://127.0.0.1:{admin}{path}", method=method,
                                 headers={"authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def on_call(admin):
    """What the README's on-call walk-through shows: a number the bot pumped, looked up and
    lifted as a customer says it (the bot's sixth number, +62 812 0000 005)."""
    said = urllib.parse.quote("0812 0000 005")
    for method, path in [
        ("GET", f"/admin/blocked?route=otp-send&value={said}"),
        ("DELETE", f"/admin/usage?route=otp-send&limit=per-phone&value={said}"),
        ("GET", f"/admin/blocked?route=otp-send&value={said}"),
    ]:
        print(f"otp_attack: {method} {path}\n  {json.dumps(admin_call(admin, method, path))}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "otp_attack.svg")
    prometheus = os.environ.get("PROMETHEUS_BIN", "prometheus")
    if not shutil.which(prometheus):
        sys.exit("otp_attack: no Prometheus server (apt-get install prometheus, or PROMETHEUS_BIN)")
    slidegate, demo = binaries()
    work = tempfile.mkdtemp(prefix="slidegate-otp-attack.")
    procs = []

    def start(args, log, env=None):
        p = subprocess.Popen(args, stdout=open(os.path.join(work, log), "w"),
                             stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    try:
        gw, admin, up, prom, redis_port = free_ports(5)
        if shutil.which("redis-server"):
            start(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save",
                   "", "--appendonly", "no", "--dir", work], "redis.log")
        else:
            redis_port = None
        start([demo, f"127.0.0.1:{up}"], "demo-upstream.log")
        env = dict(os.environ, SLIDEGATE_ADMIN_TOKEN=TOKEN, SLIDEGATE_KEY_SECRET=SECRET)
        env.pop("SLIDEGATE_REDIS_URL", None)
        start([slidegate, "--config", recipe(work, gw, admin, up, redis_port)], "slidegate.log", env)
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: slidegate\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{admin}']\n")
        start([prometheus, f"--config.file={work}/prometheus.yml",
               f"--storage.tsdb.path={work}/tsdb", f"--web.listen-address=127.0.0.1:{prom}",
               "--log.level=warn"], "prometheus.log")
        wait_for(f"http://127.0.0.1:{admin}/readyz", "slidegate")
        wait_for(f"http://127.0.0.1:{prom}/-/ready", "prometheus")
        time.sleep(2)  # a baseline scrape

        started = time.time()
        stop = threading.Event()
        threads, seen = traffic(gw, started, stop)
        while time.time() < started + END:
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        time.sleep(2)  # the last scrapes

        panels = []
        for title, unit, targets in dashboard_queries():
            series = []
            for expr, fmt in targets:
                for r in query_range(prom, expr, started, started + END):
                    pts = [(float(t) - started, float(v)) for t, v in r["values"]]
                    series.append((legend(fmt, r["metric"]), pts))
            # series that stay at zero throughout (decisions nobody got) are left out
            series = sorted(s for s in series if any(v > 0 for _, v in s[1]))
            panels.append((title, unit, series))
        draw(panels, started, out)
        print(f"otp_attack: drew {out}")
        print(f"otp_attack: legitimate users got {seen['user']}, the bot {seen['bot']}")
        req = urllib.request.Request(f"http://127.0.0.1:{admin}/admin/blocked?route=otp-send",
                                     headers={"authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req) as r:
            listed = json.load(r)["blocked"]
        print(f"otp_attack: GET /admin/blocked?route=otp-send lists {len(listed)} keys; the first:")
        for entry in listed[:3]:
            print("  " + json.dumps(entry))
        on_call(admin)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
