"""Where sweep points run: one process, a local process pool, or a Ray cluster.

An executor runs a picklable ``fn(item)`` over a list of items in chunks and yields
``(index, outcome)`` as each item finishes, in completion order.  ``run_items`` is the one
driver every executor shares: it retries a failed item once and then reports it as a
``Failure`` (never drops it), and ticks an optional progress callback.  Ray is an optional
extra, imported only inside ``RayExecutor``.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from simulator.inputs.errors import SpecsimError


@dataclass(frozen=True)
class Failure:
    """An item that failed twice: the error of its last attempt."""

    error: str


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0] if text else type(exc).__name__


def eval_chunk(fn: Callable[[Any], Any], chunk: Sequence[tuple[int, Any]]) -> list:
    """Run ``fn`` on each (index, item); one item's error never spoils its neighbours."""
    out = []
    for index, item in chunk:
        try:
            out.append((index, True, fn(item)))
        except Exception as exc:  # reported to the driver, which retries once
            out.append((index, False, _describe(exc)))
    return out


def _worker_init() -> None:
    """Pool workers leave Ctrl-C to the driver, which stops them (no traceback per worker)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _sigint_blocked:
    """Block SIGINT in this thread for the ``with`` block (no-op where unsupported)."""

    def __enter__(self):
        import signal
        self._sig = signal
        try:
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        except (AttributeError, OSError, ValueError):
            self._old = None
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            self._sig.pthread_sigmask(self._sig.SIG_SETMASK, self._old)


class SerialExecutor:
    """Every chunk in this process, in order (debugging, tiny sweeps, reproducibility checks)."""

    name = "serial"

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        if address is not None:
            raise SpecsimError("only the ray executor takes an address", field="--address")
        self.workers = 1

    def map_chunks(self, fn, chunks: list) -> Iterator[tuple[int, Any]]:
        for i, chunk in enumerate(chunks):
            try:
                yield i, eval_chunk(fn, chunk)
            except Exception as exc:
                yield i, exc

    def close(self) -> None:
        return None

    def abort(self) -> None:
        """Stop at once (Ctrl-C, SIGTERM): outstanding work is dropped, workers stopped."""
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalExecutor(SerialExecutor):
    """A ``concurrent.futures`` process pool on this machine; every core by default.

    Workers are started with ``spawn`` so that a parent holding threads (a progress bar,
    a Ray client) is never forked mid-lock.  A worker that dies breaks the pool: its chunks
    come back as errors (and are retried) and a fresh pool serves the next submissions.
    """

    name = "local"

    def __init__(self, workers: int | None = None, address: str | None = None,
                 start_method: str = "spawn") -> None:
        if address is not None:
            raise SpecsimError("only the ray executor takes an address", field="--address")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or workers < 1):
            raise SpecsimError(f"must be a whole number >= 1, got {workers!r}",
                               field="--workers")
        self.workers = workers or os.cpu_count() or 1
        self._ctx = multiprocessing.get_context(start_method)
        self._pool: cf.ProcessPoolExecutor | None = None
        self._older: set = set()  # this process's children before the pool's workers

    def _get_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._older = set(multiprocessing.active_children())
            self._pool = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=self._ctx,
                                                initializer=_worker_init)
        return self._pool

    def map_chunks(self, fn, chunks: list) -> Iterator[tuple[int, Any]]:
        pool = self._get_pool()
        # workers are spawned inside submit(): with SIGINT blocked meanwhile they start with
        # it blocked (a mask survives exec), so a Ctrl-C while they boot cannot print a
        # worker traceback; the driver's own Ctrl-C is delivered when the mask is lifted
        with _sigint_blocked():
            futures = {pool.submit(eval_chunk, fn, chunk): i for i, chunk in enumerate(chunks)}
        for fut in cf.as_completed(futures):
            try:
                yield futures[fut], fut.result()
            except Exception as exc:  # a dead worker (BrokenProcessPool) or a pickling error
                if isinstance(exc, cf.process.BrokenProcessPool):
                    self.close()
                yield futures[fut], exc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def abort(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # the pool's workers: the children born since it was made (a public API, where the
        # executor's own table of them is private); specsim's commands run one executor at a
        # time and start no other child meanwhile, so no other process is among them
        processes = [p for p in multiprocessing.active_children() if p not in self._older]
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:  # a running point would otherwise finish first
            if proc.is_alive():
                proc.terminate()
        for proc in processes:
            proc.join(timeout=5)


class RayExecutor(SerialExecutor):
    """Ray tasks, one per chunk: a local Ray instance or a cluster at ``address``."""

    name = "ray"

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise SpecsimError("the ray executor needs Ray, which is not installed",
                               field="--executor",
                               fix="pip install 'specsim[ray]', or use --executor local") from None
        self._ray = ray
        self._started = False
        self._pending: list = []  # the running map_chunks' tasks not yet done (abort cancels)
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            elif workers:
                kwargs["num_cpus"] = workers
            try:
                ray.init(**kwargs)
            except Exception as exc:
                raise SpecsimError(f"cannot start or reach Ray: {_describe(exc)}",
                                   field="--address",
                                   fix="start the cluster with 'ray start --head' and pass its "
                                       "address, or omit --address for a local instance") from None
            self._started = True
        self.workers = int(ray.cluster_resources().get("CPU", 1))
        # our own retry (once, then a Failure row) replaces Ray's silent resubmission
        self._remote = ray.remote(max_retries=0)(eval_chunk)

    def map_chunks(self, fn, chunks: list) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        fn_ref = ray.put(fn)
        refs = {self._remote.remote(fn_ref, chunk): i for i, chunk in enumerate(chunks)}
        pending = list(refs)
        self._pending = pending
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            self._pending = pending
            for ref in done:
                try:
                    yield refs[ref], ray.get(ref)
                except Exception as exc:  # a lost worker or node
                    yield refs[ref], exc

    def close(self) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False

    def abort(self) -> None:
        for ref in self._pending:  # tasks on a cluster outlive a local shutdown
            try:
                self._ray.cancel(ref, force=True)
            except Exception:
                pass
        self._pending = []
        self.close()


EXECUTORS: dict[str, type] = {
    "local": LocalExecutor,
    "serial": SerialExecutor,
    "ray": RayExecutor,
}


def check_executor_args(name: str, *, workers: int | None = None,
                        address: str | None = None) -> None:
    """Validate an executor's arguments without starting anything (no pool, no Ray)."""
    if name not in EXECUTORS:
        raise SpecsimError(f"unknown executor {name!r}", field="--executor",
                           fix="choose one of: " + ", ".join(EXECUTORS))
    if address is not None and name != "ray":
        raise SpecsimError("only the ray executor takes an address", field="--address",
                           fix="add --executor ray")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise SpecsimError(f"must be a whole number >= 1, got {workers!r}", field="--workers")
    if name == "ray":
        import importlib.util
        if importlib.util.find_spec("ray") is None:
            raise SpecsimError("the ray executor needs Ray, which is not installed",
                               field="--executor",
                               fix="pip install 'specsim[ray]', or use --executor local")


def make_executor(name: str = "local", *, workers: int | None = None,
                  address: str | None = None):
    """An executor by name (``local``, ``serial``, ``ray``)."""
    check_executor_args(name, workers=workers, address=address)
    return EXECUTORS[name](workers=workers, address=address)


def _chunks(indexed: list, size: int) -> list:
    return [indexed[i:i + size] for i in range(0, len(indexed), size)]


def run_items(fn: Callable[[Any], Any], items: Sequence[Any], executor, *,
              chunk_size: int | None = None, retries: int = 1,
              on_result: Callable[[int, Any], None] | None = None,
              progress: Callable[[int, int], None] | None = None) -> list:
    """Run ``fn`` over ``items`` on ``executor``; a Failure for items that failed retries+1 times.

    ``on_result(index, value_or_failure)`` is called as each item is settled (completion
    order, for streaming); the returned list is in item order.  ``progress(done, total)`` is
    called as items settle.
    """
    if chunk_size is not None and (isinstance(chunk_size, bool)
                                   or not isinstance(chunk_size, int) or chunk_size < 1):
        raise SpecsimError(f"must be a whole number >= 1, got {chunk_size!r}",
                           field="chunk_size")
    if chunk_size is None:
        # a few chunks per worker keeps the pool busy without paying per-item overhead
        chunk_size = max(1, min(64, len(items) // (4 * max(1, executor.workers)) or 1))
    try:
        return _run_items(fn, items, executor, chunk_size, retries, on_result, progress)
    except BaseException as exc:
        if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM: stop the workers now
            executor.abort()
        raise


def _run_items(fn, items, executor, chunk_size, retries, on_result, progress) -> list:
    results: list = [None] * len(items)
    todo = list(enumerate(items))
    settled = 0
    for attempt in range(retries + 1):
        if not todo:
            break
        last = attempt == retries
        chunks = _chunks(todo, chunk_size if attempt == 0 else 1)
        failed: list[tuple[int, Any]] = []
        for ci, outcome in executor.map_chunks(fn, chunks):
            if isinstance(outcome, BaseException):
                outcome = [(i, False, _describe(outcome)) for i, _ in chunks[ci]]
            for index, ok, value in outcome:
                if ok or last:
                    results[index] = value if ok else Failure(value)
                    if on_result is not None:
                        on_result(index, results[index])
                    settled += 1
                    if progress is not None:
                        progress(settled, len(items))
                else:
                    failed.append((index, items[index]))
        todo = sorted(failed, key=lambda t: t[0])
    return results
