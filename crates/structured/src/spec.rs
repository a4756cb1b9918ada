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
    /// vLLM's `structural_tag`: free text in which each trigger must open one of the tagged
    /// structures (its `begin`, JSON valid against its schema, its `end`).
    StructuralTag(StructuralTag),
}

/// Free text with tagged JSON structures, as vLLM's `structural_tag` describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct StructuralTag {
    /// Strings that, once written, commit the output to a structure whose `begin` they start.
    pub triggers: Vec<String>,
    pub structures: Vec<TagStructure>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TagStructure {
    /// Starts with one of the triggers.
    pub begin: String,
    pub schema: Value,
    pub end: String,
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
            ConstraintSpec::StructuralTag(t) => format!("structural_tag\0{}", t.lark()),
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
            ConstraintSpec::StructuralTag(t) => {
                t.check()?;
                TopLevelGrammar::from_lark(t.lark())
            }
        })
    }
}

/// `schema` with llguidance's JSON layout options set (unless the schema sets its own): one
/// space after `:` and `,`, no other whitespace. Also for schemas embedded in Lark (`%json`).
pub fn with_compact_json(mut schema: Value) -> Value {
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

impl StructuralTag {
    /// Every structure's `begin` starts with a trigger, and there is at least one trigger.
    fn check(&self) -> Result<(), StructuredError> {
        if self.triggers.is_empty() || self.triggers.iter().any(String::is_empty) {
            return Err(StructuredError::Compile(
                "`triggers` must be a non-empty list of non-empty strings".into(),
            ));
        }
        for (i, s) in self.structures.iter().enumerate() {
            if self.trigger_of(s).is_none() {
                return Err(StructuredError::Compile(format!(
                    "structures[{i}].begin {:?} starts with none of the triggers",
                    s.begin
                )));
            }
        }
        Ok(())
    }

    /// The longest trigger `s.begin` starts with.
    fn trigger_of(&self, s: &TagStructure) -> Option<usize> {
        (0..self.triggers.len())
            .filter(|&k| s.begin.starts_with(&self.triggers[k]))
            .max_by_key(|&k| self.triggers[k].len())
    }

    /// The Lark grammar: `(text_k body_k)* TAIL`, where `text_k` is the shortest text ending
    /// in trigger `k` (a lazy lexeme), `body_k` the rest of one of trigger `k`'s structures,
    /// and `TAIL` free text that contains no trigger (so a trigger always opens a structure).
    fn lark(&self) -> String {
        let mut rules = Vec::new();
        let mut segments = Vec::new();
        for (k, trigger) in self.triggers.iter().enumerate() {
            let bodies: Vec<String> = self
                .structures
                .iter()
                .filter(|s| self.trigger_of(s) == Some(k))
                .map(|s| {
                    let rest = lark_string(&s.begin[trigger.len()..]);
                    let schema = with_compact_json(s.schema.clone());
                    format!("{rest} %json {schema} {}", lark_string(&s.end))
                })
                .collect();
            if bodies.is_empty() {
                continue;
            }
            segments.push(format!("seg_{k}"));
            rules.push(format!("seg_{k}: text_{k} body_{k}"));
            rules.push(format!(
                "text_{k}[lazy]: /(.|\\n)*{}/",
                regex_literal(trigger)
            ));
            rules.push(format!("body_{k}: {}", bodies.join(" | ")));
        }
        let any_trigger: Vec<String> = self.triggers.iter().map(|t| regex_literal(t)).collect();
        let start = if segments.is_empty() {
            "start: TAIL".to_string()
        } else {
            format!("start: ({})* TAIL", segments.join(" | "))
        };
        format!(
            "{start}\n{}\nTAIL: /(.|\\n)*/ & ~/(.|\\n)*({})(.|\\n)*/\n",
            rules.join("\n"),
            any_trigger.join("|")
        )
    }
}

/// `text` as a Lark string literal (JSON string escapes are valid there).
fn lark_string(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        json!(text).to_string()
    }
}

/// `text` matched literally inside a Lark `/regex/`.
fn regex_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$'
            | '#' | '&' | '-' | '~' | '/' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}
