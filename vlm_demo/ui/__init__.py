"""The Gradio page, the only code that imports gradio (and only from ``controls`` on). Its modules, from the
page's API down to the app: ``contract`` (each endpoint's inputs and outputs by name), ``views`` (the panels'
HTML, text and pictures; Gradio-free), ``controls`` (a model picker's controls), ``layout`` (the components,
placed and named), ``chat_request`` (the page's values as a typed request), ``stream`` (an answer's stream as
page updates), ``handlers`` (what each event does) and ``app`` (``build_app``, ``launch_kwargs``).

Nothing is imported here, so ``vlm_demo.ui.views`` and ``vlm_demo.ui.contract`` load without gradio."""
