//! [`ConstraintSpec`]: the shapes of constraint a request can ask for, and the llguidance
//! grammar each becomes.

use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

use crate::StructuredError;

/// One output constraint.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against a JSON schema.
    JsonSchema(Value),
    /// Text matching a regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A Lark grammar (llguidance's dialect, with `%json` for embedded schemas).
    Lark(String),
}

impl ConstraintSpec {
    /// A stable text naming the constraint, hashed as the compiled grammar's cache key.
    pub(crate) fn cache_key(&self) -> String {
        match self {
            ConstraintSpec::JsonObject => "json_object".to_string(),
            ConstraintSpec::JsonSchema(v) => format!("json_schema\0{v}"),
            ConstraintSpec::Regex(r) => format!("regex\0{r}"),
            ConstraintSpec::Choice(c) => format!("choice\0{}", json!(c)),
            ConstraintSpec::Lark(g) => format!("lark\0{g}"),
        }
    }

    /// The llguidance grammar. JSON is generated compactly (`", "` and `": "` separators, no
    /// free whitespace): a small model left free to emit whitespace can run to `max_tokens`.
    pub(crate) fn grammar(&self) -> Result<TopLevelGrammar, StructuredError> {
        Ok(match self {
            ConstraintSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(with_compact_json(json!({"type": "object"})))
            }
            ConstraintSpec::JsonSchema(schema) => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(StructuredError::Compile(
                        "a JSON schema must be an object or a boolean".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(with_compact_json(schema.clone()))
            }
            ConstraintSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            ConstraintSpec::Choice(choices) => {
                if choices.is_empty() {
                    return Err(StructuredError::Compile("the choice list is empty".into()));
                }
                // JSON string escapes are valid Lark string literals.
                let alts: Vec<String> = choices.iter().map(|c| json!(c).to_string()).collect();
                TopLevelGrammar::from_lark(format!("start: {}", alts.join(" | ")))
            }
            ConstraintSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        })
    }
}

/// `schema` with llguidance's JSON layout options set (unless the schema sets its own).
fn with_compact_json(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance").or_insert_with(|| {
            json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}
