"""The registered model: a LoRA adapter on its base model, served as an MLflow pyfunc.

`load_verified("models:/<name>@challenger").predict(["prompt", ...])`
(`components.tracking.model_registry`: the version's files checked against the SHA-256 manifest
recorded at registration before its code runs, then `mlflow.pyfunc.load_model`) returns one
completion per prompt (chat template applied; greedy unless `params` set a temperature). A prompt
may also be a chat: a JSON list of {"role", "content"} messages (`chat_messages`).
The base model is loaded from the packaged `base_model` artifact when present, else from the
`$GROUPWISE_BASE_MODEL_DIR`, else from the folder recorded at registration, else (an `hf` base named
by id) from the local Hugging Face cache: the first whose weights hash to the SHA-256 recorded at
registration (`components.tracking.base_model`).
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow.pyfunc


def chat_messages(item) -> list[dict[str, str]]:
    """A prompt as chat messages: a plain string is one user message; a list of {"role", "content"}
    messages, or such a list as a JSON string (the logged signature takes strings), is a chat."""
    if isinstance(item, str):
        text = item.strip()
        if text.startswith("[") and text.endswith("]"):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, list) and parsed and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in parsed):
                return [{"role": str(m["role"]), "content": str(m["content"])} for m in parsed]
        return [{"role": "user", "content": item}]
    if isinstance(item, (list, tuple)) and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in item):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in item]
    raise ValueError(f"a prompt must be a string or a list of {{'role', 'content'}} messages, got {type(item).__name__}")


class GroupwiseLoraModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        import torch

        from components.models.lora import load_adapter
        from components.models.provision import load_base_model
        from components.tracking.base_model import expected_weights_sha256, locate_base_model

        # the weights themselves are hashed, not the SHA-256 their folder claims (~1 s for the 135M's 540 MB)
        provenance = Path(context.artifacts["provenance"])
        base_dir = locate_base_model(
            expected_weights_sha256(provenance),
            packaged=context.artifacts.get("base_model"),
            recorded=context.model_config.get("base_model_dir"),
            provenance_file=provenance,
        )
        model, self.tokenizer = load_base_model(Path(base_dir), context.model_config.get("dtype", "float32"))
        self.model = load_adapter(model, Path(context.artifacts["adapter"]))
        self.torch = torch

    def predict(self, context, model_input, params=None):  # no type hints: the logged signature holds the params schema
        params = params or {}
        if hasattr(model_input, "columns"):  # MLflow hands a list[str] over as a one-column frame
            column = "prompt" if "prompt" in model_input.columns else model_input.columns[0]
            items = list(model_input[column])
        else:
            items = list(model_input)
        texts = [self.tokenizer.apply_chat_template(chat_messages(item), add_generation_prompt=True, tokenize=False) for item in items]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        temperature = float(params.get("temperature", 0.0))
        with self.torch.no_grad():
            out = self.model.generate(
                **enc,
                max_new_tokens=int(params.get("max_new_tokens", 64)),
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        width = enc["input_ids"].shape[1]
        return [self.tokenizer.decode(seq[width:], skip_special_tokens=True).strip() for seq in out]
