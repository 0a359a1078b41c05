"""A real `llama-server` on 127.0.0.1: started, asked, and always stopped.

`LlamaServer` is a context manager that stops its process however the block is left (Ctrl-C
included); `complete` sends one greedy `/completion` request and returns the server's own account
of it (`Completion`); `stream` sends it streamed, which also times its first token (the load race,
`engines.llama_cpp.load_race`). `slot_args`: the flags of a server with N parallel slots.
`repack_flags`: the flags this machine's CPU needs for any server.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from polyplan.formats.errors import PolyplanError

_HOST = "127.0.0.1"
_START_TIMEOUT_S = 120.0
_REQUEST_TIMEOUT_S = 600.0
TRACE_WAIT_S = 2.0  # the server's log is written by a thread of its own: the last round's line may follow the answer
_ROUND_LINE = re.compile(r"accepted\s+(\d+)/\s*(\d+) draft tokens")


@dataclass(frozen=True)
class Completion:
    """One `/completion` answer, as the server timed it (its `timings`, greedy)."""

    token_ids: tuple[int, ...]
    predicted_n: int  # tokens generated
    predicted_ms: float  # the server's generation time (prefill excluded)
    prompt_ms: float  # the server's prefill time
    draft_n: int  # drafted tokens (0 without speculation)
    draft_accepted: int
    wall_s: float  # the request's wall time seen from the client
    rounds: tuple[tuple[int, int], ...] | None = None  # (drafted, accepted) of each round that drafted, from the trace
    first_token_s: float | None = None  # from sending the request to its first token's chunk (streamed requests only)

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else float("nan")


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        return probe.getsockname()[1]


class LlamaServer:
    """`llama-server -m MODEL ARGS` on 127.0.0.1, for the duration of a `with` block; its output
    goes to `log_path` (kept). `port`: a fixed port (a taken one is replaced by a free one).
    `trace`: log every verified draft and read each request's rounds from it (`Completion.rounds`)."""

    def __init__(self, binary: Path, model: Path, args: Sequence[str], log_path: Path, *, port: int | None = None,
                 start_timeout_s: float = _START_TIMEOUT_S, trace: bool = False) -> None:
        self.binary, self.model, self.args = Path(binary), Path(model), tuple(args)
        self.log_path = Path(log_path)
        self.port = port
        self.start_timeout_s = start_timeout_s
        self.trace = trace
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{_HOST}:{self.port}"

    def __enter__(self) -> "LlamaServer":
        if self.port is None or not _port_is_free(self.port):
            self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [str(self.binary), "-m", str(self.model), "--host", _HOST, "--port", str(self.port), *self.args]
        with open(self.log_path, "w", encoding="utf-8") as log:
            log.write("$ " + " ".join(command) + "\n")
        log = open(self.log_path, "a", encoding="utf-8")
        try:
            env = {**os.environ, "LLAMA_TRACE": "1"} if self.trace else None
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        finally:
            log.close()
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PolyplanError(f"llama-server exited at start ({self.last_log_line()}); log: {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        raise PolyplanError(f"llama-server did not become healthy within {self.start_timeout_s:.0f} s ({self.last_log_line()}); log: {self.log_path}")

    def last_log_line(self) -> str:
        lines = [line for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else "no output"

    def stop(self) -> None:
        """Terminate the server (kill it if it has not gone within 10 s); safe to call twice."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def complete(self, prompt_ids: Sequence[int], n_predict: int, *, ignore_eos: bool = True) -> Completion:
        """One greedy completion of exactly `n_predict` tokens (no prompt cache); `ignore_eos`
        False: up to `n_predict`, ending after the end-of-generation token the server samples (the
        server keeps an ignored end of sequence from being sampled, so the text after it is not
        what the model writes there)."""
        body = {"prompt": list(map(int, prompt_ids)), "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
                "seed": 0, "cache_prompt": False, "ignore_eos": ignore_eos, "return_tokens": True, "stream": False}
        request = urllib.request.Request(f"{self.url}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        logged = self.log_path.stat().st_size if self.trace else 0
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=_REQUEST_TIMEOUT_S) as answer:
                payload = json.loads(answer.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")[:200]
            raise PolyplanError(f"llama-server refused a completion ({error.code}: {detail})") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            raise PolyplanError(f"llama-server did not answer ({error}; {self.last_log_line()}); log: {self.log_path}") from None
        wall = time.perf_counter() - start
        done = parse_completion(payload, wall)
        return self._traced(done, logged) if self.trace else done

    def stream(self, prompt_ids: Sequence[int], n_predict: int, timeout_s: float = _REQUEST_TIMEOUT_S,
               ignore_eos: bool = True) -> Completion:
        """`complete`, streamed (`stream_completion`): the same account, with its first token's
        time; never traced (with several slots the log interleaves their rounds). A server that
        stops answering is named with its last log line."""
        try:
            return stream_completion(self.url, prompt_ids, n_predict, timeout_s, ignore_eos)
        except PolyplanError as error:
            raise PolyplanError(f"{error}; its last log line: {self.last_log_line()}; log: {self.log_path}") from None

    def _traced(self, done: Completion, offset: int) -> Completion:
        """`done` with its rounds read from the log written after `offset`, once they add up to
        its drafted and accepted totals (waiting up to `TRACE_WAIT_S` for the log's writer)."""
        deadline = time.monotonic() + TRACE_WAIT_S
        while True:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode("utf-8", "replace")
            rounds = tuple((int(m), int(a)) for a, m in _ROUND_LINE.findall(text))
            if (sum(m for m, _ in rounds), sum(a for _, a in rounds)) == (done.draft_n, done.draft_accepted):
                return dataclasses.replace(done, rounds=rounds)
            if time.monotonic() > deadline:
                return done
            time.sleep(0.02)


def slot_args(slots: int, slot_context: int) -> tuple[str, ...]:
    """`-np slots` with a context of `slot_context` tokens each: llama-server divides `-c` among
    its slots (the KV cache is not unified when `-np` is given), so `-c` is their product."""
    return ("-np", str(slots), "-c", str(slots * slot_context))


def stream_completion(url: str, prompt_ids: Sequence[int], n_predict: int, timeout_s: float = _REQUEST_TIMEOUT_S,
                      ignore_eos: bool = True) -> Completion:
    """One greedy completion as `LlamaServer.complete` asks it, streamed from the server at `url`
    (server-sent events, a chunk per token, the last one with the timings): the same `Completion`,
    its `first_token_s` timed at the first chunk holding a token. The whole request is bounded by
    `timeout_s`, not only each read. `ignore_eos` False: it ends at the model's end of sequence,
    as a server's requests do, instead of after exactly `n_predict` tokens.

    Raises:
        PolyplanError: the server refused, did not answer, broke off or took longer than `timeout_s`.
    """
    body = {"prompt": list(map(int, prompt_ids)), "n_predict": n_predict, "temperature": 0.0, "top_k": 1, "seed": 0,
            "cache_prompt": False, "ignore_eos": ignore_eos, "return_tokens": True, "stream": True}
    request = urllib.request.Request(f"{url}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    deadline = start + timeout_s
    tokens: list[int] = []
    first = final = None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            for raw in answer:
                if time.perf_counter() > deadline:
                    raise PolyplanError(f"llama-server took over {timeout_s:.0f} s for one completion")
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise PolyplanError(f"llama-server failed a completion ({str(chunk['error'])[:200]})")
                got = [int(token) for token in chunk.get("tokens") or ()]
                if got and first is None:
                    first = time.perf_counter() - start
                tokens += got
                if chunk.get("stop"):
                    final = chunk
                    break
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", "replace")[:200]
        raise PolyplanError(f"llama-server refused a completion ({error.code}: {detail})") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:
        raise PolyplanError(f"llama-server did not answer ({error or type(error).__name__})") from None
    if final is None:
        raise PolyplanError("llama-server ended a streamed completion before its last chunk")
    done = parse_completion({**final, "tokens": tokens}, time.perf_counter() - start)
    return dataclasses.replace(done, first_token_s=first)


def round_widths(rounds: Sequence[tuple[int, int]] | None, generated: int, accepted: int) -> tuple[int, ...] | None:
    """Tokens each round of a request drafted: its traced `rounds`, then empty rounds up to
    `generated` − 1 − `accepted` (every round emits its accepted tokens and one more); None where
    it was not traced, or the trace holds more rounds than that."""
    total = generated - 1 - accepted
    if rounds is None or len(rounds) > total:
        return None
    return tuple(m for m, _ in rounds) + (0,) * (total - len(rounds))


def parse_completion(payload: dict, wall_s: float) -> Completion:
    """The fields polyplan reads from a `/completion` answer (JSON edge)."""
    timings = payload.get("timings") or {}
    tokens = payload.get("tokens") or []
    return Completion(
        token_ids=tuple(int(t) for t in tokens),
        predicted_n=int(timings.get("predicted_n", len(tokens))),
        predicted_ms=float(timings.get("predicted_ms", 0.0)),
        prompt_ms=float(timings.get("prompt_ms", 0.0)),
        draft_n=int(timings.get("draft_n", 0) or 0),
        draft_accepted=int(timings.get("draft_n_accepted", 0) or 0),
        wall_s=wall_s,
    )


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((_HOST, port))
        except OSError:
            return False
        return True


def repack_flags(target, files: dict[str, str]) -> tuple[str, ...]:
    """`--no-repack` when llama.cpp's extra weight buffers crash on this CPU for any GGUF a
    llama-server would load (`decoder.llama_cpp_buffers`: the verdict polyplan's own members use)."""
    from polyplan.decoder.llama_cpp import llama_cpp_module
    from polyplan.decoder.llama_cpp_buffers import extra_buffers

    try:
        version = llama_cpp_module().__version__
    except PolyplanError:  # no bindings: nothing to probe with, and the flags are only advice
        return ()
    paths = sorted({str(path) for path in (target.source, *files.values()) if path and str(path).endswith(".gguf")})
    return () if all(extra_buffers(path, version).enabled for path in paths) else ("--no-repack",)
