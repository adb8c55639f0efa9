//! Properties of lowering a tool result, over generated values and profiles.

use proptest::prelude::*;
use protocol_droid_domain::ir::lower::{check_expressible, lower_tool_result};
use protocol_droid_domain::ir::{
    Annotations, ContentBlock, EmbeddedResource, ImageContent, JsonObject, ResourceContents,
    ResourceLink, TextContent, ToolResult,
};
use protocol_droid_domain::{DegradePolicy, Feature, FeatureProfile, ProtocolVersion};
use serde_json::{Value, json};

/// The features a tool result can need, so generated profiles are about them.
const RESULT_FEATURES: [Feature; 9] = [
    Feature::AudioContent,
    Feature::ResourceLinkContent,
    Feature::ToolStructuredOutput,
    Feature::StructuredContentAnyJson,
    Feature::Icons,
    Feature::EntityMeta,
    Feature::AnnotationsLastModified,
    Feature::ToolResultType,
    Feature::Titles,
];

fn meta() -> impl Strategy<Value = Option<JsonObject>> {
    prop::option::of(Just(JsonObject::from_iter([(
        "example.com/k".to_owned(),
        json!("v"),
    )])))
}

fn annotations() -> impl Strategy<Value = Option<Annotations>> {
    prop::option::of(
        (any::<bool>(), any::<bool>()).prop_map(|(priority, modified)| Annotations {
            audience: None,
            priority: priority.then(|| serde_json::Number::from(1)),
            last_modified: modified.then(|| "2025-06-18T00:00:00Z".to_owned()),
            extra: JsonObject::new(),
        }),
    )
}

fn block() -> impl Strategy<Value = ContentBlock> {
    let text = ("[a-z ]{0,12}", annotations(), meta()).prop_map(|(text, annotations, meta)| {
        ContentBlock::Text(TextContent {
            text,
            annotations,
            meta,
            extra: JsonObject::new(),
        })
    });
    let media = (any::<bool>(), "[A-Za-z0-9+/]{0,16}", annotations(), meta()).prop_map(
        |(is_audio, data, annotations, meta)| {
            let body = ImageContent {
                data,
                mime_type: if is_audio { "audio/wav" } else { "image/png" }.to_owned(),
                annotations,
                meta,
                extra: JsonObject::new(),
            };
            if is_audio {
                ContentBlock::Audio(body)
            } else {
                ContentBlock::Image(body)
            }
        },
    );
    let link = (any::<bool>(), annotations(), meta()).prop_map(|(icons, annotations, meta)| {
        ContentBlock::ResourceLink(ResourceLink {
            uri: "file:///a.txt".to_owned(),
            name: "a".to_owned(),
            title: None,
            description: None,
            mime_type: Some("text/plain".to_owned()),
            size: None,
            icons: icons.then(Vec::new),
            annotations,
            meta,
            extra: JsonObject::new(),
        })
    });
    let embedded = (meta(), meta()).prop_map(|(block_meta, contents_meta)| {
        ContentBlock::Resource(EmbeddedResource {
            resource: ResourceContents::Text {
                uri: "file:///b.txt".to_owned(),
                mime_type: None,
                text: "b".to_owned(),
                meta: contents_meta,
                extra: JsonObject::new(),
            },
            annotations: None,
            meta: block_meta,
            extra: JsonObject::new(),
        })
    });
    prop_oneof![text, media, link, embedded]
}

fn structured() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(json!({ "a": 1 }))),
        Just(Some(json!([1, 2]))),
        Just(Some(json!("scalar"))),
    ]
}

fn tool_result() -> impl Strategy<Value = ToolResult> {
    (
        prop::collection::vec(block(), 0..5),
        structured(),
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(content, structured, is_error, complete)| {
            let mut result = ToolResult::from_content(content);
            result.structured_content = structured;
            result.is_error = is_error;
            result.result_type = complete.then(|| "complete".to_owned());
            result
        })
}

fn profile() -> impl Strategy<Value = FeatureProfile> {
    prop::collection::vec(any::<bool>(), RESULT_FEATURES.len()).prop_map(|picks| {
        RESULT_FEATURES
            .into_iter()
            .zip(picks)
            .filter(|(_, keep)| *keep)
            .map(|(feature, _)| feature)
            .collect()
    })
}

fn version() -> impl Strategy<Value = ProtocolVersion> {
    prop::sample::select(ProtocolVersion::ALL.to_vec())
}

proptest! {
    #[test]
    fn a_value_the_target_can_express_is_returned_unchanged_and_unreported(
        value in tool_result(), profile in profile(), version in version()
    ) {
        // Widened to what the value needs, so every case is expressible
        // (rather than filtering, which rejects most generated cases).
        let profile = value.required_features().iter().fold(profile, FeatureProfile::with);
        prop_assert!(check_expressible(&value.required_features(), &profile, version).is_ok());
        for policy in [DegradePolicy::strict(), DegradePolicy::permissive()] {
            let (lowered, report) = lower_tool_result(value.clone(), &profile, version, policy)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&lowered, &value);
            prop_assert!(report.is_empty());
        }
    }

    #[test]
    fn every_downgrade_is_reported_and_the_result_fits_the_target(
        value in tool_result(), profile in profile(), version in version()
    ) {
        let missing = value.required_features().missing_from(profile).without(Feature::ToolResultType);
        let (lowered, report) =
            lower_tool_result(value.clone(), &profile, version, DegradePolicy::permissive())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(
            lowered.required_features().is_subset_of(profile.features()),
            "still needs {:?}", lowered.required_features().missing_from(profile)
        );
        prop_assert!(report.features().is_subset_of(missing));
        prop_assert_eq!(report.is_empty(), missing.is_empty(), "{:?}", report);
        if report.is_empty() {
            let mut unchanged = value;
            if !profile.allows(Feature::ToolResultType) {
                unchanged.result_type = None;
            }
            prop_assert_eq!(lowered, unchanged);
        }
    }

    #[test]
    fn a_strict_policy_never_downgrades(
        value in tool_result(), profile in profile(), version in version()
    ) {
        let missing = value.required_features().missing_from(profile).without(Feature::ToolResultType);
        match lower_tool_result(value, &profile, version, DegradePolicy::strict()) {
            Ok((_, report)) => {
                prop_assert!(report.is_empty());
                prop_assert!(missing.is_empty());
            }
            Err(_) => prop_assert!(!missing.is_empty()),
        }
    }
}
