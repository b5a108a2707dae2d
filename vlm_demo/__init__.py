"""vlm-demo: chat with vision-language models served by vLLM, and see what the engine receives."""
