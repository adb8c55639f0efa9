//! Elicitation: the server asking the user for input (2025-06-18).
//!
//! Two unions live here and both are read by their tag, never by trial:
//! [`ElicitRequestParams`] by `mode` (absent means form, as in 2025-06-18),
//! and [`PrimitiveSchemaDefinition`] by `type` and then by the member that
//! tells the enum shapes apart (`enum`, `oneOf`, `enumNames`, `items.anyOf`).

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Number, Value};

use super::literals::{ModeForm, ModeUrl, TypeArray, TypeBoolean, TypeObject, TypeString};
use super::tasks::TaskMetadata;
use protocol_droid_domain::ir::JsonObject;

/// Params of `elicitation/create`: `ElicitRequestParams`, form or URL mode.
#[derive(Clone, Debug, PartialEq)]
pub enum ElicitRequestParams {
    /// Ask through a form the client renders.
    Form(ElicitRequestFormParams),
    /// Send the user to a URL (2025-11-25).
    Url(ElicitRequestUrlParams),
}

impl Serialize for ElicitRequestParams {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Form(p) => p.serialize(serializer),
            Self::Url(p) => p.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ElicitRequestParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let mode = match value.get("mode") {
            None => ModeForm::VALUE,
            Some(Value::String(mode)) => mode.as_str(),
            Some(_) => return Err(D::Error::custom("elicitation `mode` must be a string")),
        };
        match mode {
            ModeForm::VALUE => from_value(value).map(Self::Form),
            ModeUrl::VALUE => from_value(value).map(Self::Url),
            other => Err(D::Error::custom(format_args!(
                "unknown elicitation mode `{other}`"
            ))),
        }
    }
}

/// Form-mode elicitation params: `ElicitRequestFormParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitRequestFormParams {
    /// `"form"`, or absent (2025-06-18 has no mode; 2025-11-25 makes it
    /// optional). Kept so a round trip writes what was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ModeForm>,
    /// What to ask.
    pub message: String,
    /// The form: a flat object schema of primitive fields.
    pub requested_schema: RequestedSchema,
    /// Asks for a task instead of a result (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
    /// Request metadata (2025-11-25; 2026-07-28 defines none here).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// URL-mode elicitation params (2025-11-25): `ElicitRequestURLParams`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitRequestUrlParams {
    /// Always `"url"`.
    pub mode: ModeUrl,
    /// Why the user should open the URL.
    pub message: String,
    /// The URL to open.
    pub url: String,
    /// Correlates `notifications/elicitation/complete` (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_id: Option<String>,
    /// Asks for a task instead of a result (2025-11-25 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
    /// Request metadata (2025-11-25; 2026-07-28 defines none here).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The schema of an elicitation form: `ElicitRequestFormParams.requestedSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestedSchema {
    /// The dialect, when named (2025-11-25).
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Always `"object"`.
    #[serde(rename = "type")]
    pub kind: TypeObject,
    /// The fields, by name. Sorted, as JSON object order carries no meaning.
    pub properties: BTreeMap<String, PrimitiveSchemaDefinition>,
    /// The fields that must be filled in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<Vec<String>>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// One field of an elicitation form: `PrimitiveSchemaDefinition`.
#[derive(Clone, Debug, PartialEq)]
pub enum PrimitiveSchemaDefinition {
    /// A free-text field.
    String(StringSchema),
    /// A number or integer field.
    Number(NumberSchema),
    /// A yes/no field.
    Boolean(BooleanSchema),
    /// A choice from fixed options.
    Enum(EnumSchema),
}

impl Serialize for PrimitiveSchemaDefinition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::String(s) => s.serialize(serializer),
            Self::Number(s) => s.serialize(serializer),
            Self::Boolean(s) => s.serialize(serializer),
            Self::Enum(s) => s.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for PrimitiveSchemaDefinition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        match schema_type(&value).map_err(D::Error::custom)? {
            "string" if is_string_enum(&value) => EnumSchema::from_json(value).map(Self::Enum),
            "string" => from_value(value).map(Self::String),
            "number" | "integer" => from_value(value).map(Self::Number),
            "boolean" => from_value(value).map(Self::Boolean),
            "array" => EnumSchema::from_json(value).map(Self::Enum),
            other => Err(D::Error::custom(format_args!(
                "`{other}` is not a type an elicitation field may have"
            ))),
        }
    }
}

/// A free-text field: `StringSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StringSchema {
    /// Always `"string"`.
    #[serde(rename = "type")]
    pub kind: TypeString,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Fewest characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    /// Most characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// A format the value must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<StringFormat>,
    /// Pre-filled value (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `StringSchema.format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StringFormat {
    /// An email address.
    Email,
    /// A URI.
    Uri,
    /// A date.
    Date,
    /// A date and time.
    DateTime,
}

/// A number field: `NumberSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NumberSchema {
    /// `"number"` or `"integer"`.
    #[serde(rename = "type")]
    pub kind: NumberType,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Smallest value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<Number>,
    /// Largest value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<Number>,
    /// Pre-filled value (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Number>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `NumberSchema.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NumberType {
    /// Any number.
    Number,
    /// Whole numbers only.
    Integer,
}

/// A yes/no field: `BooleanSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BooleanSchema {
    /// Always `"boolean"`.
    #[serde(rename = "type")]
    pub kind: TypeBoolean,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Pre-filled value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A choice from fixed options: `EnumSchema`.
///
/// 2025-06-18 has only `{type: "string", enum, enumNames?}`; 2025-11-25
/// splits it into single and multi select, titled and untitled, and keeps
/// the old shape as [`LegacyTitledEnumSchema`].
#[derive(Clone, Debug, PartialEq)]
pub enum EnumSchema {
    /// `{type: "string", enum}`.
    UntitledSingleSelect(UntitledSingleSelectEnumSchema),
    /// `{type: "string", oneOf: [{const, title}]}`.
    TitledSingleSelect(TitledSingleSelectEnumSchema),
    /// `{type: "array", items: {type: "string", enum}}`.
    UntitledMultiSelect(UntitledMultiSelectEnumSchema),
    /// `{type: "array", items: {anyOf: [{const, title}]}}`.
    TitledMultiSelect(TitledMultiSelectEnumSchema),
    /// `{type: "string", enum, enumNames}` (2025-06-18's shape).
    LegacyTitled(LegacyTitledEnumSchema),
}

impl EnumSchema {
    fn from_json<E: serde::de::Error>(value: Value) -> Result<Self, E> {
        match schema_type(&value).map_err(E::custom)? {
            "string" if value.get("oneOf").is_some() => {
                from_value(value).map(Self::TitledSingleSelect)
            }
            // Without `enumNames` the legacy shape and the untitled one are
            // the same object; the newer name is the one to read it as.
            "string" if value.get("enumNames").is_some() => {
                from_value(value).map(Self::LegacyTitled)
            }
            "string" => from_value(value).map(Self::UntitledSingleSelect),
            "array" if value.get("items").and_then(|i| i.get("anyOf")).is_some() => {
                from_value(value).map(Self::TitledMultiSelect)
            }
            "array" => from_value(value).map(Self::UntitledMultiSelect),
            other => Err(E::custom(format_args!(
                "`{other}` is not a type an enum field may have"
            ))),
        }
    }
}

impl Serialize for EnumSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::UntitledSingleSelect(s) => s.serialize(serializer),
            Self::TitledSingleSelect(s) => s.serialize(serializer),
            Self::UntitledMultiSelect(s) => s.serialize(serializer),
            Self::TitledMultiSelect(s) => s.serialize(serializer),
            Self::LegacyTitled(s) => s.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for EnumSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::from_json(Value::deserialize(deserializer)?)
    }
}

/// A single choice without labels (2025-11-25):
/// `UntitledSingleSelectEnumSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UntitledSingleSelectEnumSchema {
    /// Always `"string"`.
    #[serde(rename = "type")]
    pub kind: TypeString,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The options.
    #[serde(rename = "enum")]
    pub options: Vec<String>,
    /// Pre-selected option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// A single choice with labels (2025-11-25): `TitledSingleSelectEnumSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TitledSingleSelectEnumSchema {
    /// Always `"string"`.
    #[serde(rename = "type")]
    pub kind: TypeString,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The options with their labels.
    pub one_of: Vec<EnumOption>,
    /// Pre-selected option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Several choices without labels (2025-11-25):
/// `UntitledMultiSelectEnumSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UntitledMultiSelectEnumSchema {
    /// Always `"array"`.
    #[serde(rename = "type")]
    pub kind: TypeArray,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Fewest selections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    /// Most selections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    /// The options.
    pub items: UntitledEnumItems,
    /// Pre-selected options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Vec<String>>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `UntitledMultiSelectEnumSchema.items`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UntitledEnumItems {
    /// Always `"string"`.
    #[serde(rename = "type")]
    pub kind: TypeString,
    /// The options.
    #[serde(rename = "enum")]
    pub options: Vec<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// Several choices with labels (2025-11-25): `TitledMultiSelectEnumSchema`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TitledMultiSelectEnumSchema {
    /// Always `"array"`.
    #[serde(rename = "type")]
    pub kind: TypeArray,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Fewest selections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    /// Most selections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
    /// The options with their labels.
    pub items: TitledEnumItems,
    /// Pre-selected options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Vec<String>>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `TitledMultiSelectEnumSchema.items`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TitledEnumItems {
    /// The options with their labels.
    pub any_of: Vec<EnumOption>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// One labelled option: `{const, title}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnumOption {
    /// The value sent back.
    #[serde(rename = "const")]
    pub value: String,
    /// The label shown.
    pub title: String,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// 2025-06-18's enum field, labels in a parallel array:
/// `LegacyTitledEnumSchema` (to be removed by the spec).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LegacyTitledEnumSchema {
    /// Always `"string"`.
    #[serde(rename = "type")]
    pub kind: TypeString,
    /// Label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The options.
    #[serde(rename = "enum")]
    pub options: Vec<String>,
    /// Labels, one per option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enum_names: Option<Vec<String>>,
    /// Pre-selected option (2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// The user's answer: `ElicitResult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    /// What the user did.
    pub action: ElicitAction,
    /// The form's values, on `accept` in form mode. Sorted by field name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<BTreeMap<String, ElicitValue>>,
    /// Result metadata (2025-06-18 to 2025-11-25).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

/// `ElicitResult.action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// The user submitted (or, in URL mode, consented).
    Accept,
    /// The user said no.
    Decline,
    /// The user dismissed the request.
    Cancel,
}

/// One value of an elicitation form.
#[derive(Clone, Debug, PartialEq)]
pub enum ElicitValue {
    /// Text or a single choice.
    String(String),
    /// A number, kept as sent.
    Number(Number),
    /// A yes/no.
    Boolean(bool),
    /// Several choices (2025-11-25).
    Strings(Vec<String>),
}

impl Serialize for ElicitValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::String(s) => serializer.serialize_str(s),
            Self::Number(n) => n.serialize(serializer),
            Self::Boolean(b) => serializer.serialize_bool(*b),
            Self::Strings(v) => v.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ElicitValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(s) => Ok(Self::String(s)),
            Value::Number(n) => Ok(Self::Number(n)),
            Value::Bool(b) => Ok(Self::Boolean(b)),
            array @ Value::Array(_) => from_value(array).map(Self::Strings),
            _ => Err(D::Error::custom(
                "an elicitation value must be a string, number, boolean or string array",
            )),
        }
    }
}

/// Params of `notifications/elicitation/complete` (2025-11-25 only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationCompleteNotificationParams {
    /// The URL elicitation that finished.
    pub elicitation_id: String,
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Members this build does not model.
    #[serde(flatten)]
    pub extra: JsonObject,
}

fn from_value<T: DeserializeOwned, E: serde::de::Error>(value: Value) -> Result<T, E> {
    serde_json::from_value(value).map_err(E::custom)
}

fn schema_type(value: &Value) -> Result<&str, &'static str> {
    match value.get("type") {
        Some(Value::String(kind)) => Ok(kind),
        Some(_) => Err("a field schema's `type` must be a string"),
        None => Err("a field schema needs a `type`"),
    }
}

fn is_string_enum(value: &Value) -> bool {
    value.get("enum").is_some() || value.get("oneOf").is_some()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_url_elicitation_is_not_read_as_a_form() -> Result<(), serde_json::Error> {
        let wire = json!({ "mode": "url", "message": "m", "url": "https://x", "requestedSchema": {
            "type": "object", "properties": {} } });
        let params: ElicitRequestParams = serde_json::from_value(wire.clone())?;
        assert!(matches!(params, ElicitRequestParams::Url(_)));
        assert_eq!(serde_json::to_value(&params)?, wire);
        // And a form struct refuses a URL-mode object outright.
        assert!(serde_json::from_value::<ElicitRequestFormParams>(wire).is_err());
        Ok(())
    }

    #[test]
    fn a_missing_mode_is_a_form_and_stays_missing() -> Result<(), serde_json::Error> {
        let wire =
            json!({ "message": "m", "requestedSchema": { "type": "object", "properties": {} } });
        let params: ElicitRequestParams = serde_json::from_value(wire.clone())?;
        assert!(matches!(
            params,
            ElicitRequestParams::Form(ElicitRequestFormParams { mode: None, .. })
        ));
        assert_eq!(serde_json::to_value(&params)?, wire);
        Ok(())
    }

    #[test]
    fn an_unknown_mode_is_refused() {
        let wire = json!({ "mode": "carrier-pigeon", "message": "m" });
        assert!(serde_json::from_value::<ElicitRequestParams>(wire).is_err());
    }

    #[test]
    fn enum_shapes_are_told_apart_by_their_members() -> Result<(), serde_json::Error> {
        let cases = [
            (json!({ "type": "string" }), "string"),
            (
                json!({ "type": "string", "enum": ["a"] }),
                "untitled-single",
            ),
            (
                json!({ "type": "string", "enum": ["a"], "enumNames": ["A"] }),
                "legacy",
            ),
            (
                json!({ "type": "string", "oneOf": [{ "const": "a", "title": "A" }] }),
                "titled-single",
            ),
            (
                json!({ "type": "array", "items": { "type": "string", "enum": ["a"] } }),
                "untitled-multi",
            ),
            (
                json!({ "type": "array", "items": { "anyOf": [{ "const": "a", "title": "A" }] } }),
                "titled-multi",
            ),
            (json!({ "type": "integer", "minimum": 1 }), "number"),
        ];
        for (wire, expected) in cases {
            let read: PrimitiveSchemaDefinition = serde_json::from_value(wire.clone())?;
            let got = match &read {
                PrimitiveSchemaDefinition::String(_) => "string",
                PrimitiveSchemaDefinition::Number(_) => "number",
                PrimitiveSchemaDefinition::Boolean(_) => "boolean",
                PrimitiveSchemaDefinition::Enum(EnumSchema::UntitledSingleSelect(_)) => {
                    "untitled-single"
                }
                PrimitiveSchemaDefinition::Enum(EnumSchema::TitledSingleSelect(_)) => {
                    "titled-single"
                }
                PrimitiveSchemaDefinition::Enum(EnumSchema::UntitledMultiSelect(_)) => {
                    "untitled-multi"
                }
                PrimitiveSchemaDefinition::Enum(EnumSchema::TitledMultiSelect(_)) => "titled-multi",
                PrimitiveSchemaDefinition::Enum(EnumSchema::LegacyTitled(_)) => "legacy",
            };
            assert_eq!(got, expected, "{wire}");
            assert_eq!(serde_json::to_value(&read)?, wire);
        }
        Ok(())
    }

    #[test]
    fn a_number_bound_of_one_stays_one() -> Result<(), serde_json::Error> {
        let wire = json!({ "type": "number", "minimum": 1, "maximum": 2.5 });
        let read: NumberSchema = serde_json::from_value(wire)?;
        assert_eq!(
            serde_json::to_string(&read)?,
            r#"{"type":"number","minimum":1,"maximum":2.5}"#
        );
        Ok(())
    }

    #[test]
    fn a_field_of_an_unknown_type_is_refused() {
        let wire = json!({ "type": "object", "properties": {} });
        assert!(serde_json::from_value::<PrimitiveSchemaDefinition>(wire).is_err());
    }
}
