"""What the rows need on the machine: commands and files, and the apt packages that bring them.

`bench/run.sh` asks `bench.py --missing-packages` for the packages to install; the program then
checks again and stops with the missing tool's name if one is still absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Need:
    """A tool a row needs: its name, a test, and the apt package that brings it (or None)."""

    what: str
    present: Callable[[], bool]
    package: Optional[str] = None


def command(name: str, package: Optional[str] = None) -> Need:
    """A command on PATH, installed from `package` when missing (None: not installed here)."""
    return Need(name, lambda: shutil.which(name) is not None, package)


def nginx_path() -> str:
    """The NGINX binary: on PATH, or where Debian puts it."""
    return shutil.which("nginx") or "/usr/sbin/nginx"


def nginx_present() -> bool:
    """Whether an NGINX binary can be run."""
    path = nginx_path()
    return os.path.isfile(path) and os.access(path, os.X_OK)


def nginx_modules_dir() -> str:
    """NGINX's dynamic module directory (from `nginx -V`), or Debian's default."""
    if nginx_present():
        out = subprocess.run([nginx_path(), "-V"], capture_output=True, text=True).stderr
        found = re.search(r"--modules-path=(\S+)", out)
        if found:
            return found.group(1)
    return "/usr/lib/nginx/modules"


NGINX = Need("nginx", nginx_present, "nginx")
NGINX_LUA = Need(
    "NGINX's Lua module (ngx_http_lua_module.so)",
    lambda: nginx_present()
    and all(
        os.path.isfile(os.path.join(nginx_modules_dir(), f"{m}.so"))
        for m in ("ndk_http_module", "ngx_http_lua_module")
    ),
    "libnginx-mod-http-lua",
)
REDIS_SERVER = command("redis-server")
