# syntax=docker/dockerfile:1
# One app image on two stacks (the app's steps below are shared; RUNTIME picks the stack):
#   GPU (default): the official vLLM CUDA image of the release requirements.txt pins.
#     docker build -t vlm-demo . && docker run --gpus all -p 7860:7860 vlm-demo
#   CPU: Debian bookworm with the pinned CPU stack (requirements-cpu.lock, as scripts/setup.sh installs it)
#   and the default tiny model built in, so the first start builds nothing.
#     docker build --build-arg RUNTIME=cpu -t vlm-demo:cpu . && docker run -p 7860:7860 vlm-demo:cpu
#   Podman on a machine like the CI's (no registry, a debootstrap base): scripts/container.sh build
# Behind a proxy with its own CA, pass the bundle as a build secret (never baked into the image):
#   --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt
ARG RUNTIME=gpu
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0

FROM ${VLLM_IMAGE} AS stack-gpu
RUN --mount=type=bind,source=requirements.txt,target=/tmp/requirements.txt \
    pip install --no-cache-dir -r /tmp/requirements.txt

FROM debian:bookworm AS stack-cpu
# fonts-noto-cjk: the labels drawn on pictures (grounding boxes) may be Chinese (vlm_demo/grounding.py's label_font)
ARG UV_VERSION=0.13.9
# UV_CACHE_DIR: where uv keeps wheels during the build (a build cache; scripts/container.sh points it at the
# host's own uv cache, so a machine that ran scripts/setup.sh downloads nothing twice)
ARG UV_CACHE_DIR=/root/.cache/uv
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 python3-venv libnuma1 libtcmalloc-minimal4 \
      libgl1 libglib2.0-0 ca-certificates fonts-noto-cjk >/dev/null \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=requirements-cpu.lock,target=/tmp/requirements-cpu.lock \
    set -e; \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca; fi; \
    python3 -m venv /opt/uv; \
    /opt/uv/bin/pip install -q --no-cache-dir "uv==${UV_VERSION}"; \
    /opt/uv/bin/uv venv -q -p /usr/bin/python3 /opt/venv; \
    UV_LINK_MODE=copy /opt/uv/bin/uv pip sync -q --compile-bytecode -p /opt/venv/bin/python /tmp/requirements-cpu.lock; \
    rm -rf /opt/uv
ENV PATH=/opt/venv/bin:$PATH

FROM stack-${RUNTIME} AS app
ARG RUNTIME
# not root: the app, its caches (tiny models, the hub's downloads) and the engines run as this user
RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin app
WORKDIR /app
COPY --chown=app:app . .
USER app
ENV HOME=/home/app GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=7860 GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_ENABLE_HF_TRANSFER=0 PYTHONUNBUFFERED=1
# the CPU image: build its default model (the tiny Qwen2.5-VL) now and check that vLLM's renderer runs here;
# the GPU image's default is a hub checkpoint, downloaded at the first start instead
RUN if [ "$RUNTIME" = cpu ]; then \
      python3 -m vlm_demo inspect --model tiny-qwen2.5-vl --text "What is in this picture?" >/dev/null; fi
EXPOSE 7860
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/' % os.environ.get('GRADIO_SERVER_PORT', '7860'), timeout=4)"]
# SIGTERM (docker stop) ends the app in order: the page closes, the engines shut down (vlm_demo/serving.py)
STOPSIGNAL SIGTERM
ENTRYPOINT []
CMD ["python3", "app.py"]
