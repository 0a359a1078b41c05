"""Prompt text to token ids (`encode_prompt`): an instruct model expects its own turn markup, so
the text becomes one user turn plus the generation prompt as `apply_chat_template` renders it,
tokenized without a second set of specials (templates write their own BOS). `raw=True`, or a
tokenizer without a template (a base model), sends the text as it is, with the usual specials.
"""

from __future__ import annotations

from polyplan.formats.errors import PolyplanError, first_line


def encode_prompt(tokenizer, text: str, *, raw: bool = False, where: str = "prompt") -> list[int]:
    """Token ids of `text`; PolyplanError naming `where` when the template fails to render or
    does not return text."""
    if raw or not getattr(tokenizer, "chat_template", None):
        return [int(i) for i in tokenizer(text)["input_ids"]]
    try:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
    except Exception as error:  # noqa: BLE001 - Jinja's TemplateError, raise_exception(), TypeError…
        raise PolyplanError(
            f"{where}: the target's chat template failed to render ({first_line(error)}); "
            "pass --raw-prompts to send raw text"
        ) from None
    if not isinstance(rendered, str):
        raise PolyplanError(f"{where}: the target's chat template did not render to text; pass --raw-prompts to send raw text")
    return [int(i) for i in tokenizer(rendered, add_special_tokens=False)["input_ids"]]
