//! Properties of reading frames from a peer that may send anything.

use proptest::prelude::*;
use protocol_droid_domain::jsonrpc::framing::LineFramer;
use protocol_droid_domain::jsonrpc::{ErrorCode, Incoming, Message, ResponseId, parse};

proptest! {
    /// Whatever arrives, reading it answers: a message, or an error with a
    /// JSON-RPC code a receiver can send back.
    #[test]
    fn any_bytes_read_as_a_message_or_a_coded_error(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        match parse(&bytes) {
            Ok(_) => {}
            Err(e) => prop_assert!(
                e.code == ErrorCode::PARSE_ERROR || e.code == ErrorCode::INVALID_REQUEST,
                "{e:?}"
            ),
        }
    }

    /// JSON-shaped input of any structure is classified, never refused as
    /// unparseable, and a readable request id survives into the error.
    #[test]
    fn any_json_value_is_classified(id in prop_oneof![Just(None), any::<i64>().prop_map(Some)],
                                    method in prop::option::of("[a-z/]{0,12}"),
                                    with_version in any::<bool>()) {
        let mut map = serde_json::Map::new();
        if with_version {
            map.insert("jsonrpc".into(), "2.0".into());
        }
        if let Some(id) = id {
            map.insert("id".into(), id.into());
        }
        if let Some(method) = &method {
            map.insert("method".into(), method.clone().into());
        }
        let frame = serde_json::to_vec(&map).map_err(|e| TestCaseError::fail(e.to_string()))?;
        match parse(&frame) {
            Ok(Incoming::Single(Message::Request(request))) => {
                prop_assert!(with_version && method.is_some());
                prop_assert_eq!(Some(request.id), id.map(Into::into));
            }
            Ok(Incoming::Single(Message::Notification(_))) => {
                prop_assert!(with_version && method.is_some() && id.is_none());
            }
            Ok(other) => prop_assert!(false, "unexpected {other:?}"),
            Err(e) => {
                prop_assert_eq!(e.code, ErrorCode::INVALID_REQUEST);
                if let Some(id) = id {
                    prop_assert_eq!(e.id, ResponseId::Id(id.into()));
                }
            }
        }
    }

    /// However a stream is cut into reads, the framer yields the same lines.
    #[test]
    fn framing_does_not_depend_on_how_reads_are_cut(
        lines in prop::collection::vec("[a-z{}\":,]{1,20}", 1..8),
        cuts in prop::collection::vec(1usize..7, 0..20),
    ) {
        let stream: Vec<u8> = lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect();
        let mut whole = LineFramer::new(64);
        let expected = whole.push(&stream);

        let mut pieces = LineFramer::new(64);
        let mut seen = Vec::new();
        let mut rest = stream.as_slice();
        for cut in cuts {
            let (head, tail) = rest.split_at(cut.min(rest.len()));
            seen.extend(pieces.push(head));
            rest = tail;
        }
        seen.extend(pieces.push(rest));
        prop_assert_eq!(seen, expected);
    }
}
