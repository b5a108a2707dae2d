"""The Gradio page, the only code that imports gradio (and only from ``controls`` on). Its modules, from the
page's API down to the app: ``contract`` (each endpoint's inputs and outputs by name), the views (Gradio-free:
``status``, the status line and the waits; ``panels``, the prompt and expansion panels and Export; ``overlays``,
the pictures drawn; ``answer``, an answer's stats line and figures), ``controls`` (a model picker's controls),
``layout`` (the components, placed and named), ``chat_request`` (the page's values as a typed request), ``stream``
(an answer's stream as page updates), the event handlers (``handlers``: answers; ``renders``: the panels as the
message, its files and the controls change; ``models``: picks, starts and the status) and ``app`` (``build_app``,
``launch_kwargs``).

Nothing is imported here, so the views and ``vlm_demo.ui.contract`` load without gradio."""
