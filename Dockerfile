# GPU image: the official vLLM CUDA image of the same release as requirements.txt.
#   docker build -t vlm-demo . && docker run --gpus all -p 7860:7860 vlm-demo
FROM vllm/vllm-openai:v0.32.0
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
ENV GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=7860 HF_HUB_ENABLE_HF_TRANSFER=0
EXPOSE 7860
ENTRYPOINT []
CMD ["python3", "app.py"]
