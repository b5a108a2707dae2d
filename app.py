"""Serve the vlm-demo page: python app.py [--model NAME] [--host HOST] [--port PORT]."""

import sys

from vlm_demo.cli import serve_main

if __name__ == "__main__":
    sys.exit(serve_main())
