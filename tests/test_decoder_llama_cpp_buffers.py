"""llama.cpp's extra weight buffers: probed once per CPU and file type in a child process, off
where the child dies (an AMX crash seen on one Intel VM), never probed for float files."""

from __future__ import annotations

import subprocess

import pytest

from polyplan.decoder import llama_cpp_buffers as buffers


@pytest.fixture
def quantized_file(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(buffers.OVERRIDE_ENV, raising=False)
    monkeypatch.setattr(buffers, "gguf_file_type", lambda path: 15)  # Q4_K_M
    return tmp_path / "model.gguf"


def _child(returncode: int, calls: list):
    def run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, returncode, b"", b"")
    return run


def test_a_child_that_dies_turns_the_buffers_off_once_and_the_answer_is_cached(quantized_file, monkeypatch):
    calls, lines = [], []
    monkeypatch.setattr(buffers.subprocess, "run", _child(-11, calls))  # SIGSEGV
    first = buffers.extra_buffers(quantized_file, "0.3.36", log=lines.append)
    again = buffers.extra_buffers(quantized_file, "0.3.36", log=lines.append)
    assert (first.enabled, first.reason) == (False, "probed") and (again.enabled, again.reason) == (False, "cached")
    assert len(calls) == 1 and len(lines) == 1 and "running llama.cpp without them" in lines[0]
    assert buffers.extra_buffers(quantized_file, "0.3.37").reason == "probed"  # another llama.cpp: asked again
    assert len(calls) == 2


@pytest.mark.parametrize("returncode", [0, 3])  # decoded; or could not load the file (the member will say why)
def test_a_child_that_does_not_crash_keeps_the_buffers_on(quantized_file, monkeypatch, returncode):
    calls = []
    monkeypatch.setattr(buffers.subprocess, "run", _child(returncode, calls))
    verdict = buffers.extra_buffers(quantized_file, "0.3.36")
    assert verdict.enabled and verdict.reason == "probed" and calls[0][-1] == str(buffers.PROBE_TOKENS)


def test_float_files_are_never_probed_and_the_override_wins(quantized_file, monkeypatch):
    monkeypatch.setattr(buffers.subprocess, "run", lambda *a, **k: pytest.fail("probed a float file"))
    monkeypatch.setattr(buffers, "gguf_file_type", lambda path: 0)  # ALL_F32
    assert buffers.extra_buffers(quantized_file, "0.3.36").reason == "float file"
    monkeypatch.setenv(buffers.OVERRIDE_ENV, "0")
    assert buffers.extra_buffers(quantized_file, "0.3.36") == buffers.ExtraBuffers(False, "override")


def test_the_file_type_is_read_from_the_header(tmp_path):
    from tiny_gguf import write_tiny_gguf

    write_tiny_gguf(tmp_path / "tiny.gguf")
    assert buffers.gguf_file_type(tmp_path / "tiny.gguf") == 0  # no general.file_type, every tensor float32
    (tmp_path / "fake.gguf").write_bytes(b"GGUF")
    assert buffers.gguf_file_type(tmp_path / "fake.gguf") is None


def test_a_stated_file_type_wins_and_a_quantized_tensor_without_one_is_unknown(tmp_path):
    import gguf
    import numpy as np

    def write(path, file_type, tensor_type):
        writer = gguf.GGUFWriter(str(path), "llama")
        if file_type is not None:
            writer.add_file_type(file_type)
        data = np.zeros((4, 32), dtype=np.float32)
        if tensor_type == gguf.GGMLQuantizationType.Q8_0:
            data = gguf.quants.quantize(data, tensor_type)
        writer.add_tensor("token_embd.weight", data, raw_dtype=tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    write(tmp_path / "q4km.gguf", 15, gguf.GGMLQuantizationType.F32)
    assert buffers.gguf_file_type(tmp_path / "q4km.gguf") == 15
    write(tmp_path / "unsaid.gguf", None, gguf.GGMLQuantizationType.Q8_0)
    assert buffers.gguf_file_type(tmp_path / "unsaid.gguf") is None


def test_the_export_hands_llama_server_the_flag_this_machine_needs(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from polyplan.engines.llama_cpp import server

    monkeypatch.setattr(buffers, "extra_buffers", lambda path, version, **_: buffers.ExtraBuffers("bad" not in str(path), "probed"))
    target = SimpleNamespace(source=str(tmp_path / "target.gguf"))
    assert server.repack_flags(target, {"drafter": str(tmp_path / "drafter.gguf")}) == ()
    assert server.repack_flags(target, {"drafter": str(tmp_path / "bad-drafter.gguf")}) == ("--no-repack",)



def test_the_real_probe_decodes_a_file_that_runs(tmp_path, monkeypatch):
    """The probe's own child must not crash where llama.cpp works. It once handed llama.cpp a log
    callback that Python freed, so the child segfaulted on every file and every CPU and the
    buffers were off everywhere (found on an AMD EPYC, which has no AMX). Control: that script
    is a crash here too."""
    pytest.importorskip("llama_cpp", reason="the llama extra is not installed")
    from tiny_gguf import write_tiny_gguf

    write_tiny_gguf(tmp_path / "tiny.gguf")
    assert buffers.probe(tmp_path / "tiny.gguf", timeout_s=120.0)
    assert buffers.probe(tmp_path / "missing.gguf", timeout_s=120.0)  # cannot load: exit 3, not a crash
    freed = "llama_cpp.llama_log_set(llama_cpp.llama_log_callback(lambda level, text, data: None), None)\n"
    monkeypatch.setattr(buffers, "_PROBE", buffers._PROBE.split("quiet = ")[0] + freed + buffers._PROBE.split("llama_cpp.llama_log_set(quiet, None)\n")[1])
    assert not buffers.probe(tmp_path / "tiny.gguf", timeout_s=120.0)


def test_a_verdict_of_the_old_probe_is_asked_again(quantized_file, monkeypatch):
    """Verdicts cached by probe version 1 (whose child always crashed) are not trusted."""
    store = buffers.cache_root() / "llama.cpp" / buffers.CACHE_FILE
    store.parent.mkdir(parents=True)
    store.write_text('{"%s | llama-cpp-python 0.3.36 | file type 15": false}' % buffers.cpu_model())
    calls = []
    monkeypatch.setattr(buffers.subprocess, "run", _child(0, calls))
    assert buffers.extra_buffers(quantized_file, "0.3.36") == buffers.ExtraBuffers(True, "probed") and len(calls) == 1
