"""A local Ray that lives in a small process of its own: ``python -m fgl_ray.runtime.ray_host``.

A driver that starts Ray with ``ray.init()`` runs Ray's start-up in its own interpreter; started
from a background thread while the driver imports torch and PyG, the two fight over the
interpreter lock and Ray's start takes about three times as long (measured on 2 cores: Ray up
after 9 s instead of 3). So :class:`~fgl_ray.runtime.ray_backend.RaySession` starts Ray here,
in a process that imports nothing but Ray, and the driver joins it by address once its own
imports are done. The host keeps Ray up until its standard input closes (the driver closed it,
or the driver died), then shuts Ray down on its own: the driver never waits for that.

Besides :mod:`fgl_ray.runtime.ray_backend`, this is the only module under ``fgl_ray/runtime``
that imports Ray.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

#: The line the host prints once Ray is up: this prefix, then the cluster's address.
ADDRESS_PREFIX = "FGL_RAY_ADDRESS "
LOCAL_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class RayHost:
    """Starts the host process at once; :meth:`address` waits until its Ray is up."""

    def __init__(self, num_cpus: int | None = None) -> None:
        command = [sys.executable, "-m", "fgl_ray.runtime.ray_host"]
        if num_cpus is not None:
            command += ["--num-cpus", str(num_cpus)]
        self._log = tempfile.TemporaryFile(mode="w+")
        # its own session: a Ctrl-C at the terminal is the driver's to handle (it stops after the round
        # under way, with a checkpoint); Ray must stay up for that
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                        text=True, env=LOCAL_RAY_ENV | dict(os.environ), start_new_session=True)
        self._address: str | None = None
        self.started = time.time()

    def address(self) -> str:
        """The host's Ray address (waits for its start; raises with the host's output if it failed)."""
        while self._address is None:
            line = self.process.stdout.readline()
            if line.startswith(ADDRESS_PREFIX):
                self._address = line.removeprefix(ADDRESS_PREFIX).strip()
            elif not line and self.process.poll() is not None:
                self._log.seek(0)
                raise RuntimeError(f"the local Ray did not start (exit code {self.process.returncode}):\n"
                                   f"{self._log.read()[-3000:]}")
        return self._address

    def stop(self) -> None:
        """Tells the host to shut Ray down; returns at once (the host finishes on its own)."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()

    def wait(self, timeout_s: float = 60.0) -> None:
        """Waits for the host to have shut Ray down and exited."""
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Hosts a local Ray until standard input closes.")
    parser.add_argument("--num-cpus", type=int, default=None)
    args = parser.parse_args(argv)
    import ray

    context = ray.init(num_cpus=args.num_cpus, include_dashboard=False, configure_logging=False,
                       log_to_driver=False)
    print(ADDRESS_PREFIX + context.address_info["gcs_address"], flush=True)
    try:
        sys.stdin.read()
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
