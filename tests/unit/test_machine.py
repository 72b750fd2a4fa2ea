"""Which machine computes bfloat16, and the warning an engine gives where it is emulated."""

from __future__ import annotations

import logging

import pytest
import torch

from components import machine

X86_EMULATED = "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma\n"
X86_NATIVE = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ARM_NATIVE = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.fixture
def cpu(tmp_path, monkeypatch):
    """Point the machine record at a written /proc/cpuinfo on a machine without CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    machine.warn_if_emulated_bf16.cache_clear()

    parse = machine._cpu

    def use(text: str) -> None:
        info = tmp_path / "cpuinfo"
        info.write_text(text)
        monkeypatch.setattr(machine, "_cpu", lambda: parse(info))

    yield use
    machine.warn_if_emulated_bf16.cache_clear()


def test_cpuinfo_gives_the_model_and_the_kernel_flags_on_x86_and_arm(tmp_path):
    for text, model, isa in [(X86_EMULATED, "AMD EPYC", []), (X86_NATIVE, "Intel(R) Xeon(R) Platinum 8480+", ["avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]),
                             (ARM_NATIVE, "", ["bf16"])]:  # fmt: skip
        info = tmp_path / "cpuinfo"
        info.write_text(text)
        assert machine._cpu(info) == (model, isa)


@pytest.mark.parametrize(("cpuinfo", "native"), [(X86_EMULATED, False), (X86_NATIVE, True), (ARM_NATIVE, True)])
def test_native_bf16_follows_the_cpus_bf16_instructions(cpu, cpuinfo, native):
    cpu(cpuinfo)
    assert machine.native_bf16() is native


def test_bfloat16_on_an_emulating_cpu_warns_once_a_process_naming_the_fields(cpu, caplog):
    cpu(X86_EMULATED)
    with caplog.at_level(logging.WARNING, logger=machine.__name__):
        assert machine.warn_if_emulated_bf16("float32") is False
        assert machine.warn_if_emulated_bf16("bfloat16") is True
        assert machine.warn_if_emulated_bf16("bfloat16") is True  # cached: no second line
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "eval.dtype" in lines[0] and "train.rollout.vllm.dtype" in lines[0] and "float32" in lines[0]


def test_bfloat16_where_the_cpu_computes_it_gives_no_warning(cpu, caplog):
    cpu(X86_NATIVE)
    with caplog.at_level(logging.WARNING, logger=machine.__name__):
        assert machine.warn_if_emulated_bf16("bfloat16") is False
    assert not caplog.records


@pytest.mark.parametrize(("cpuinfo", "auto"), [(X86_EMULATED, "float32"), (X86_NATIVE, "bfloat16")])
def test_auto_is_bfloat16_only_where_the_machine_computes_it(cpu, cpuinfo, auto):
    cpu(cpuinfo)
    assert machine.resolve_dtype("auto") == auto
    assert [machine.resolve_dtype(d) for d in ("float32", "bfloat16", "float16")] == ["float32", "bfloat16", "float16"]


@pytest.mark.parametrize(("cpuinfo", "auto"), [(X86_EMULATED, "float32"), (X86_NATIVE, "bfloat16")])
def test_params_name_the_dtype_that_runs_so_auto_is_logged_and_fingerprinted_as_it(cpu, cpuinfo, auto):
    """`eval.dtype` / `train.rollout.vllm.dtype` default to auto, resolved when the params are read
    (the default too): logged and fingerprinted as the dtype that runs. Work saved under the former
    bfloat16 default keeps its fingerprint, which the default matches only where bf16 is native."""
    from components.config import Params

    cpu(cpuinfo)
    default = Params.model_validate({"train": {"rollout": {"engine": "vllm", "vllm": {}}}, "eval": {}})  # read on this CPU
    assert (default.eval.dtype, default.train.rollout.vllm.dtype, default.eval.fairness.dtype) == (auto, auto, "float32")
    chosen = Params.model_validate({"eval": {"dtype": "auto"}, "train": {"rollout": {"engine": "vllm", "vllm": {"dtype": "auto"}}}})
    explicit = Params.model_validate({"eval": {"dtype": auto}, "train": {"rollout": {"engine": "vllm", "vllm": {"dtype": auto}}}})
    sections = {"train", "eval"}
    assert chosen.fingerprint(sections) == explicit.fingerprint(sections) == default.fingerprint(sections)
    saved = Params.model_validate({"eval": {"dtype": "bfloat16"}, "train": {"rollout": {"engine": "vllm", "vllm": {"dtype": "bfloat16"}}}})
    assert (default.fingerprint(sections) == saved.fingerprint(sections)) is (auto == "bfloat16")
    assert Params.model_validate({"eval": {"fairness": {"dtype": "auto"}}}).eval.fairness.dtype == auto
    with pytest.raises(ValueError, match="dtype"):
        Params.model_validate({"eval": {"dtype": "float8"}})


@pytest.mark.parametrize(("cpuinfo", "auto"), [(X86_EMULATED, "fp32"), (X86_NATIVE, "bf16"), (ARM_NATIVE, "bf16")])
def test_train_precision_auto_is_bf16_only_where_the_machine_computes_it_and_is_logged_as_it(cpu, cpuinfo, auto):
    from components.config import Params

    cpu(cpuinfo)
    chosen = Params.model_validate({"train": {"precision": "auto"}})
    assert chosen.train.precision == auto  # what runs is what is logged and fingerprinted
    assert chosen.fingerprint({"train"}) == Params.model_validate({"train": {"precision": auto}}).fingerprint({"train"})
    assert [Params.model_validate({"train": {"precision": p}}).train.precision for p in ("fp32", "bf16")] == ["fp32", "bf16"]
    with pytest.raises(ValueError, match="precision"):
        Params.model_validate({"train": {"precision": "fp16"}})


@pytest.mark.parametrize(
    ("cpuinfo", "kind", "native"),
    [(X86_EMULATED, "without AVX-512 or BF16", "emulated: auto takes float32"), (X86_NATIVE, "AMX-BF16", "native"),
     ("model name\t: Xeon\nflags\t\t: avx2 avx512f\n", "AVX-512 without BF16", "emulated"),
     ("model name\t: EPYC\nflags\t\t: avx2 avx512f avx512_bf16\n", "AVX512-BF16", "native")],
)  # fmt: skip
def test_the_run_starts_with_one_line_naming_the_cpu_kind_and_what_auto_chose(cpu, cpuinfo, kind, native):
    cpu(cpuinfo)
    assert machine.cpu_kind() == kind
    line = machine.machine_line(machine.resolve_dtype("auto"), machine.resolve_precision("auto"))
    assert f"({kind})" in line and f"bfloat16 {native}" in line
    assert line.endswith("engines bfloat16, training bf16" if native == "native" else "engines float32, training fp32")
    from components.config import EvalConfig

    resolved = EvalConfig().embedding_dtype  # `auto`, resolved when read, as the engines' dtype
    assert resolved == machine.resolve_dtype("auto")
    assert machine.machine_line(machine.resolve_dtype("auto"), "fp32", resolved).endswith(f", embeddings {resolved}")
    kernel = machine.machine_line("float32", "fp32", None, "onednn")
    assert kernel.endswith("training fp32 (oneDNN matmuls)") and "oneDNN" not in machine.machine_line("float32", "bf16", None, "onednn")
