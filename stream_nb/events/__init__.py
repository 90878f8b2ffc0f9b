"""Event decoding and prediction encoding for the Kafka worker: pure logic, no Kafka imports.

See `stream_nb.events.codec` for the contract, the reason-code table and the decisions.
"""

from stream_nb.events.codec import (
    DEFAULT_MAX_BYTES,
    REASONS,
    Event,
    FeatureValue,
    Header,
    Label,
    PredictionEncoder,
    Rejected,
    SourcePosition,
    dead_letter_headers,
    dead_letter_record,
    decode_record,
    decode_records,
    encode_prediction,
    event_from_object,
    parse_json,
    record_decoder,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "REASONS",
    "Event",
    "FeatureValue",
    "Header",
    "Label",
    "Rejected",
    "SourcePosition",
    "dead_letter_headers",
    "dead_letter_record",
    "decode_record",
    "decode_records",
    "record_decoder",
    "event_from_object",
    "parse_json",
    "PredictionEncoder",
    "encode_prediction",
]
