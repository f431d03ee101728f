"""What a refusal of the library's scripts (``lua/append_plain.lua``, ``lua/append.lua``,
the draft scripts) or of the server means: each error code mapped to this library's
error through one table, and the words of each error."""

from __future__ import annotations

import re

from .. import errors
from .._core.steps import Refused
from .._core.stored.keys import ConversationKeys

ERRORS: dict[str, type[errors.MessageLogError]] = {
    "WRONGTYPE": errors.WrongTypeError,
    "OOM": errors.OutOfMemoryError,
    "MSGLOG_BADSEQ": errors.CorruptLogError,  # the counter is not a seq
    "MSGLOG_BEHIND": errors.CorruptLogError,  # the counter is behind the stream
    "MSGLOG_AHEAD": errors.CorruptLogError,  # the counter is ahead: an append would leave a gap
    "MSGLOG_FOREIGN": errors.CorruptLogError,  # the stream ends with an entry we did not write
    "MSGLOG_BADRECORD": errors.CorruptLogError,  # an idempotency record we did not write
    "MSGLOG_KEYREUSED": errors.IdempotencyConflictError,
    "MSGLOG_CONFLICT": errors.SeqConflictError,  # an expected_seq the log has moved past
    "MSGLOG_BADEDIT": errors.InvalidEditError,  # an edit of a seq that is not in the view
    "MSGLOG_TOOBIG": errors.RewriteTooLargeError,  # a trim or redact over max_rewrite_bytes
    "MSGLOG_BADVIEW": errors.CorruptLogError,  # a view hash we did not write
    "MSGLOG_STALE": errors.AppendInDoubtError,  # a producer's result no longer held
    "MSGLOG_BADBLOB": errors.InvalidMessageError,  # a blob reference the log does not hold
    "MSGLOG_ERASED": errors.ConversationErasedError,  # the tombstone of an erasure stands
    "MSGLOG_UNOWNED": errors.ConversationErasedError,  # a scoped log's owner record is gone
    "MSGLOG_SCOPE": errors.ScopeMismatchError,  # its owner record names another scope
    "MSGLOG_CURRENCY": errors.UsageCurrencyError,  # a cost in another currency than the totals'
    "MSGLOG_USAGEBIG": errors.UsageCurrencyError,  # totals past 2**53 - 1 (see _usage_refused)
    "MSGLOG_BADUSAGE": errors.CorruptLogError,  # usage totals we did not write
    # The draft scripts (lua/draft_*.lua, docs/drafts.md).
    "MSGLOG_DRAFTGONE": errors.DraftEndedError,  # no such draft: never opened, or forgotten
    "MSGLOG_DRAFTENDED": errors.DraftEndedError,  # claimed or ended (by whoever noticed)
    "MSGLOG_DRAFTBIG": errors.DraftTooLargeError,  # deltas over the draft's cap
    "MSGLOG_DRAFTS": errors.TooManyDraftsError,  # the conversation holds its most drafts
    "MSGLOG_DRAFTID": errors.InvalidArgumentError,  # a draft id taken by another writer
    "MSGLOG_DRAFTOWNER": errors.InvalidArgumentError,  # another writer's token
    "MSGLOG_BADDRAFT": errors.CorruptLogError,  # a draft state we did not write
    "MSGLOG_DRAFTSTATE": errors.CorruptLogError,  # finishing a draft nobody claimed
    "MSGLOG_DRAFTPOS": errors.CorruptLogError,  # two writers with one token
    "NOAUTH": errors.AuthenticationError,  # the server needs credentials
    "WRONGPASS": errors.AuthenticationError,  # wrong password, unknown or disabled user
    "NOPERM": errors.PermissionDeniedError,  # the user's ACL refuses a command or key
}
"""What each error code of the script (and of the server, for its keys) means."""


_SCRIPT_ACL_REFUSAL = "The user executing the script can't"  # Redis 7: ERR, not NOPERM
_DENIED: dict[type[errors.MessageLogError], str] = {
    errors.AuthenticationError: "Redis refused the client's login ({}): check the username "
    "and password it connects with. Nothing was written.",
    errors.PermissionDeniedError: "Redis's ACL refused it to the client's user ({}): see "
    "acl_rules() for what the user needs. Nothing was written.",
}


def _code_of(refused: Refused) -> str:
    if _SCRIPT_ACL_REFUSAL in refused.text:  # an ACL refusal of a call inside the script
        return "NOPERM"
    code = refused.code
    if code not in ERRORS:
        # Some servers (fakeredis) wrap a script's error reply: find its code inside.
        code = next((c for c in ERRORS if f" {c} " in f" {refused.text} "), code)
    return code


_AFTER: dict[type[errors.MessageLogError], str] = {
    errors.IdempotencyConflictError: " of messages. Nothing was written.",
    # The log's keys are not what this library writes.
    errors.CorruptLogError: ". Nothing was written; `msglog verify` lists what is wrong.",
}
"""What follows a refusal's words in the error's message, by the error's type."""


def _said(refused: Refused, code: str) -> str:
    """What a refusal says in words: its text without the script's error code (and
    without what wraps it on some servers, ``ERR Error running script ...``); the codes
    name the cases for the client, not for the person reading the error."""
    if not code.startswith("MSGLOG_"):
        return refused.text
    return refused.text.partition(code)[2].strip() or refused.text


def error_for(refused: Refused, keys: ConversationKeys) -> errors.MessageLogError:
    """This library's error for a refusal of the append script or of a read."""
    code = _code_of(refused)
    kind, said = ERRORS.get(code), _said(refused, code)
    if kind is errors.WrongTypeError:
        return kind(f"a key of {keys.stream!r}'s conversation: {refused.text}")
    if kind is errors.OutOfMemoryError:
        return kind(f"Redis refused the write (maxmemory reached): {refused.text}")
    if kind is errors.SeqConflictError:
        current = int(said.split(" ")[0])
        return errors.SeqConflictError(
            f"{said}: another writer appended first. Nothing was "
            "written; read what changed and decide again.",
            current_seq=current,
        )
    if kind is errors.InvalidEditError or kind is errors.RewriteTooLargeError:
        return _edit_refused(said)
    if kind is errors.InvalidMessageError:
        return _missing_blob(refused.text, keys)
    if kind is errors.AppendInDoubtError:
        return kind(
            f"{said}: an earlier try of this append may have committed, and the server "
            "no longer remembers (more than 64 calls of this process were in flight, "
            "or it was idle past the retry window). This try wrote nothing; read the log to "
            "find out whether the first did."
        )
    if kind in _TOLD_BY_CODE:
        return _TOLD_BY_CODE[kind](code, said, keys)
    if kind in _DENIED:
        return kind(_DENIED[kind].format(refused.text))
    if kind is not None:
        return kind(said + _AFTER.get(kind, ""))
    return errors.StorageError(f"Redis error: {refused.text}")


def _erased_or_scope_error(code: str, said: str, keys: ConversationKeys) -> errors.MessageLogError:
    """A write refused by the conversation's tombstone, or a scoped log's by its owner
    record."""
    if code == "MSGLOG_UNOWNED":
        return errors.ConversationErasedError(
            f"{keys.owner} is gone: the conversation was erased while this log object was "
            "writing, and taken again before its scoped writes could register it. Nothing "
            "was written."
        )
    if code == "MSGLOG_ERASED":
        return errors.ConversationErasedError(
            f"{keys.stream.removesuffix(':stream')} was erased (its tombstone {keys.seq} still "
            "stands): no append, edit or fork into it is accepted until the tombstone "
            "expires. Nothing was written."
        )
    return errors.ScopeMismatchError(
        f"the conversation belongs to scope {said!r}, not this log's: a conversation "
        "keeps the scope it was created with. Nothing was written.",
        recorded=tuple(said.split("/")),
    )


def _usage_refused(code: str, said: str, keys: ConversationKeys) -> errors.MessageLogError:
    """An append whose usage the totals cannot take: a cost in another currency
    (MSGLOG_CURRENCY <theirs>), or sums past what they hold exactly (MSGLOG_USAGEBIG)."""
    if code == "MSGLOG_USAGEBIG":
        return errors.InvalidMessageError(
            f"this append's usage would take {keys.usage} past {2**53 - 1} (tokens of one "
            "kind, or billionths of the cost's unit), more than totals hold. Nothing was "
            "written."
        )
    return errors.UsageCurrencyError(
        f"this append's cost is in another currency than {keys.usage}, which keeps costs "
        f"in {said}: a conversation keeps its costs in one currency (convert before "
        "writing). Nothing was written.",
        currencies=(said,),
    )


def _draft_refused(code: str, said: str, keys: ConversationKeys) -> errors.MessageLogError:
    """A draft script's refusal (lua/draft_*.lua)."""
    drafts = keys.drafts
    if code in ("MSGLOG_DRAFTGONE", "MSGLOG_DRAFTENDED"):
        outcome = said if code == "MSGLOG_DRAFTENDED" else "gone"
        return errors.DraftEndedError(
            f"the draft has ended ({outcome}): its lease lapsed and someone ended it, or it "
            f"was ended, erased or forgotten ({drafts}). Nothing was written.",
            outcome=outcome,
        )
    if code == "MSGLOG_DRAFTBIG":
        return errors.DraftTooLargeError(
            f"the draft holds {said} bytes of deltas, and this write would take it over its "
            "cap (the log's max_message_bytes). Nothing was written."
        )
    if code == "MSGLOG_DRAFTS":
        return errors.TooManyDraftsError(
            f"{drafts} holds {said.split(' ')[0]} drafts (open, or ended with deltas kept), "
            "as many as a conversation may. Nothing was written."
        )
    return errors.InvalidArgumentError(
        f"{said}: the draft belongs to another writer (a draft is written by the writer "
        "that opened it). Nothing was written."
    )


_TOLD_BY_CODE = {  # the errors whose words depend on the code (and the keys)
    errors.DraftEndedError: _draft_refused,
    errors.DraftTooLargeError: _draft_refused,
    errors.TooManyDraftsError: _draft_refused,
    errors.InvalidArgumentError: _draft_refused,
    errors.UsageCurrencyError: _usage_refused,
    errors.ConversationErasedError: _erased_or_scope_error,
    errors.ScopeMismatchError: _erased_or_scope_error,
}


def _edit_refused(said: str) -> errors.InvalidEditError:
    """An edit the script refused: MSGLOG_BADEDIT, or MSGLOG_TOOBIG (a rewrite over
    max_rewrite_bytes, which the text names)."""
    cap = re.search(r"more than (\d+) bytes of the stream \(max_rewrite_bytes", said)
    if cap is None:
        return errors.InvalidEditError(f"{said}. Nothing was written.")
    return errors.RewriteTooLargeError(
        f"{said}. Nothing was written: trim the log first, or raise max_rewrite_bytes.",
        cap=int(cap.group(1)),
    )


def _missing_blob(text: str, keys: ConversationKeys) -> errors.InvalidMessageError:
    """MSGLOG_BADBLOB <message> <part> <sha256>: a reference to bytes this conversation
    does not hold (a row read with ``blobs="refs"`` from another log, or a made-up digest)."""
    found = re.search(r"MSGLOG_BADBLOB (\d+) (\d+) ([0-9a-fA-F]+)", text)
    message, part, digest = found.groups() if found else ("0", "?", "?")
    return errors.InvalidMessageError(
        f"message {message}: content.{part} refers to blob {digest}, which "
        f"{keys.blobs} does not hold. Nothing was written. A reference is accepted only in "
        "the conversation holding its bytes (or with them in the same call): to copy a "
        'message to another conversation, append the row read with blobs="hydrate" (the '
        "default), whose as_message() carries the bytes (`msglog export` writes them "
        "inline too).",
        index=int(message),
    )
