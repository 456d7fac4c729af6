"""Secrets out of printed text: one function for every message, log line and echoed argument
that may quote a URL or a ``key=value`` setting."""

from __future__ import annotations

import re

# auth=iam (the Kafka URLs' IAM switch) names no secret and stays readable
_SECRET_PARAM = re.compile(r"(?i)((?:password|passwd|pwd|token|secret)=|auth=(?!iam(?:[&#\s'\"]|$)))[^&#\s'\"]+")
_QUOTED_PASSWORD = re.compile(r"(?i)(password\s*=\s*\")[^\"]*\"")  # a JAAS configuration's password="..."


def masked(text: str) -> str:
    """``text`` with the credentials of a URL in it (``user:password@``, up to the last ``@``,
    whatever the password holds) and the values of secret-looking parameters (``password=``,
    ``token=``, ``secret=``, ``auth=``, a JAAS ``password="..."``) replaced by ``***``. Scheme,
    host, port, path and the other parameters stay, so the text still says where."""
    at = text.rfind("@")
    if at >= 0:
        scheme_end = text.find("://")
        start = scheme_end + 3 if 0 <= scheme_end < at else 0
        text = text[:start] + "***" + text[at:]
    text = _QUOTED_PASSWORD.sub(r'\1***"', text)
    return _SECRET_PARAM.sub(r"\1***", text)

