"""The mail parser as it was before its fast paths (commit 729bb00), frozen as the reference.

`parse_mail_reference` is that commit's `parse_mail` unchanged: the standard library's
`email` (compat32) tree for every message and `html.parser` for every HTML part. The tests
assert that `stream_nb.mail.parse_mail` gives exactly its `ParsedMail` on the corpus and on
hostile mail; benchmarks/mail_parse_speed.py measures both.
"""

from tests.mail_reference.parse import parse_mail as parse_mail_reference

__all__ = ["parse_mail_reference"]
