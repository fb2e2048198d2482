"""Text normalisation shared by every reader: HTML line breaks, whitespace, PTB tokens, word budgets."""

from __future__ import annotations

import re

from trojanscope.errors import ConfigError

# aclImdb writes line breaks as literal "<br />" (sometimes "<br/>" or "<br>"); they are markup, not words.
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


def clean_text(text: str) -> str:
    """Replace ``<br />`` tags by a space, collapse all whitespace runs to one space, and strip the ends."""
    return " ".join(_BR.sub(" ", text).split())


def clip_words(text: str, max_words: int, keep: str = "last") -> str:
    """Keep the first or last ``max_words`` whitespace-separated words of ``text``.

    A text that already fits is returned unchanged; a clipped one is re-joined with single spaces.
    ``keep="last"`` suits classifiers that summarise with the final hidden state.
    """
    if keep not in ("first", "last"):
        raise ConfigError(f"clip_words keep={keep!r}: use 'first' or 'last'")
    if max_words < 1:
        raise ConfigError(f"clip_words max_words={max_words}: must be at least 1")
    words = text.split()
    if len(words) <= max_words:
        return text
    return " ".join(words[:max_words] if keep == "first" else words[-max_words:])


# Penn Treebank escapes used in the SST trees.
_PTB_ESCAPES = {
    "-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
    "``": '"', "''": '"', "`": "'",
}
_NO_SPACE_BEFORE = {",", ".", "!", "?", ";", ":", "%", ")", "]", "}", "...", "'s", "'re", "'ve", "'ll", "'d", "'m",
                    "n't", "'S", "'RE", "'VE", "'LL", "'D", "'M", "N'T"}
_NO_SPACE_AFTER = {"(", "[", "{", "$", "#"}


def detokenize_ptb(tokens: list[str]) -> str:
    """Join Penn-Treebank tokens back into ordinary text.

    ``-LRB-`` → ``(``, ```` `` ```` / ``''`` → ``"``, ```` ` ```` / ``'`` as single quotes, ``\\/`` → ``/``;
    clitics (``'s``, ``n't``) and closing punctuation attach to the word before, opening brackets and
    opening quotes to the word after. Good enough to read naturally; not a byte-exact inverse.
    """
    out: list[str] = []
    glue_next = False  # the previous token was an opening bracket or quote
    for raw in tokens:
        tok = raw.replace("\\/", "/").replace("\\*", "*")
        if raw in ("``", "`"):
            out.append(("" if glue_next or not out else " ") + _PTB_ESCAPES[raw])
            glue_next = True
            continue
        if raw in ("''", "'"):
            out.append('"' if raw == "''" else "'")
            glue_next = False
            continue
        tok = _PTB_ESCAPES.get(tok, tok)
        attach = not out or glue_next or raw in _NO_SPACE_BEFORE or tok in _NO_SPACE_BEFORE
        out.append(tok if attach else " " + tok)
        glue_next = tok in _NO_SPACE_AFTER
    return "".join(out).strip()
