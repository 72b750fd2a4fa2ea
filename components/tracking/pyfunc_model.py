"""The registered model: a LoRA adapter on its base model, served as an MLflow pyfunc.

`mlflow.pyfunc.load_model("models:/<name>@challenger").predict(["prompt", ...])` returns one
completion per prompt (chat template applied; greedy unless `params` set a temperature).
The base model is loaded from the packaged `base_model` artifact when present, else from the
folder recorded at registration (`model_config["base_model_dir"]`), else from
`$GROUPWISE_BASE_MODEL_DIR`; wherever it comes from, the SHA-256 of its weights file is computed
and must equal the one recorded at registration.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlflow.pyfunc


class GroupwiseLoraModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        import torch

        from components.models.lora import load_adapter
        from components.models.provision import PROVENANCE_FILE, load_base_model
        from components.hashing import file_sha256

        base_dir = context.artifacts.get("base_model")
        expected = json.loads(Path(context.artifacts["provenance"]).read_text())
        if base_dir is None:
            candidates = [context.model_config.get("base_model_dir"), os.environ.get("GROUPWISE_BASE_MODEL_DIR")]
            base_dir = next((c for c in candidates if c and Path(c, PROVENANCE_FILE).is_file()), None)
            if base_dir is None:
                raise FileNotFoundError(
                    "base model not found: not packaged with the model and none of "
                    f"{[c for c in candidates if c]} holds it; set GROUPWISE_BASE_MODEL_DIR"
                )
        # the weights themselves are hashed, not the SHA-256 their folder claims (~1 s for the 135M's 540 MB)
        actual = file_sha256(Path(base_dir, "model.safetensors"))
        if actual != expected.get("weights_sha256"):
            raise ValueError(
                f"{Path(base_dir, 'model.safetensors')}: SHA-256 {actual[:12]} is not the base model the adapter was "
                f"trained on ({str(expected.get('weights_sha256'))[:12]}); refusing to load"
            )
        model, self.tokenizer = load_base_model(Path(base_dir), context.model_config.get("dtype", "float32"))
        self.model = load_adapter(model, Path(context.artifacts["adapter"]))
        self.torch = torch

    def predict(self, context, model_input, params=None):  # no type hints: the logged signature holds the params schema
        from components.generation.sampling import chat_prompt

        params = params or {}
        if hasattr(model_input, "columns"):  # MLflow hands a list[str] over as a one-column frame
            column = "prompt" if "prompt" in model_input.columns else model_input.columns[0]
            prompts = [str(p) for p in model_input[column]]
        else:
            prompts = [str(p) for p in model_input]
        texts = [chat_prompt(self.tokenizer, p) for p in prompts]
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
