//! Structured-output request fields → one [`ConstraintSpec`], compiled at admission.
//!
//! Accepted, one at a time: OpenAI's `response_format` (`text`, `json_object`, `json_schema`
//! with `{name, schema, strict}`, and vLLM's `structural_tag`), vLLM's `structured_outputs`
//! (`json`, `regex`, `choice`, `grammar` (Lark), `json_object`, `structural_tag`) and its older `guided_json` / `guided_regex` /
//! `guided_choice` / `guided_grammar`. A spec that does not compile is a 400 whose `param`
//! names the field it came from; it never runs unconstrained.

use oxllm_structured::{Constraint, ConstraintSpec, StructuralTag, StructuredError, TagStructure};
use serde_json::Value;

use crate::error::ApiError;
use crate::prompt::blocking;
use crate::state::AppState;

/// The structured-output fields of a request, as sent.
#[derive(Clone, Debug, Default)]
pub struct StructuredFields {
    pub response_format: Option<Value>,
    pub structured_outputs: Option<Value>,
    pub guided_json: Option<Value>,
    pub guided_regex: Option<String>,
    pub guided_choice: Option<Vec<String>>,
    pub guided_grammar: Option<String>,
}

/// A constraint and the request field that asked for it (for error `param`s).
#[derive(Clone, Debug)]
pub struct Requested {
    pub spec: ConstraintSpec,
    pub field: String,
}

impl StructuredFields {
    /// The one constraint the fields ask for, if any.
    pub fn spec(&self) -> Result<Option<Requested>, ApiError> {
        let mut found: Vec<Requested> = Vec::new();
        if let Some(rf) = &self.response_format {
            found.extend(response_format(rf)?);
        }
        if let Some(so) = &self.structured_outputs {
            found.extend(structured_outputs(so)?);
        }
        if let Some(j) = &self.guided_json {
            found.push(requested(schema_value(j, "guided_json")?, "guided_json"));
        }
        if let Some(r) = &self.guided_regex {
            found.push(requested(ConstraintSpec::Regex(r.clone()), "guided_regex"));
        }
        if let Some(c) = &self.guided_choice {
            found.push(requested(
                ConstraintSpec::Choice(c.clone()),
                "guided_choice",
            ));
        }
        if let Some(g) = &self.guided_grammar {
            found.push(requested(ConstraintSpec::Lark(g.clone()), "guided_grammar"));
        }
        if found.len() > 1 {
            let names: Vec<&str> = found.iter().map(|r| r.field.as_str()).collect();
            return Err(ApiError::invalid_param(
                found[1].field.clone(),
                format!(
                    "only one output constraint per request, got {}",
                    names.join(" and ")
                ),
            ));
        }
        Ok(found.pop())
    }
}

fn requested(spec: ConstraintSpec, field: &str) -> Requested {
    Requested {
        spec,
        field: field.to_string(),
    }
}

fn response_format(rf: &Value) -> Result<Option<Requested>, ApiError> {
    let field = "response_format";
    let Some(obj) = rf.as_object() else {
        return Err(ApiError::invalid_param(
            field,
            "`response_format` must be an object",
        ));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(requested(ConstraintSpec::JsonObject, field))),
        Some("structural_tag") => Ok(Some(requested(structural_tag(rf, field)?, field))),
        Some("json_schema") => {
            let js = obj
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        "response_format.json_schema",
                        "`json_schema` must be an object with a `schema`",
                    )
                })?;
            if js.get("name").is_some_and(|n| !n.is_string()) {
                return Err(ApiError::invalid_param(
                    "response_format.json_schema.name",
                    "`name` must be a string",
                ));
            }
            if js
                .get("strict")
                .is_some_and(|s| !s.is_boolean() && !s.is_null())
            {
                return Err(ApiError::invalid_param(
                    "response_format.json_schema.strict",
                    "`strict` must be a boolean",
                ));
            }
            let field = "response_format.json_schema.schema";
            let schema = js.get("schema").ok_or_else(|| {
                ApiError::invalid_param(field, "`json_schema.schema` is required")
            })?;
            Ok(Some(requested(schema_value(schema, field)?, field)))
        }
        other => Err(ApiError::invalid_param(
            "response_format.type",
            format!(
                "`response_format.type` must be text, json_object, json_schema or structural_tag, got {}",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

fn structured_outputs(so: &Value) -> Result<Option<Requested>, ApiError> {
    let Some(obj) = so.as_object() else {
        return Err(ApiError::invalid_param(
            "structured_outputs",
            "`structured_outputs` must be an object",
        ));
    };
    let mut found = Vec::new();
    for (key, v) in obj {
        let field = format!("structured_outputs.{key}");
        if v.is_null() || v == &Value::Bool(false) {
            continue;
        }
        let spec = match key.as_str() {
            "json" => schema_value(v, &field)?,
            "json_object" => ConstraintSpec::JsonObject,
            "regex" => ConstraintSpec::Regex(string_of(v, &field)?),
            "grammar" => ConstraintSpec::Lark(string_of(v, &field)?),
            "choice" => ConstraintSpec::Choice(strings_of(v, &field)?),
            "structural_tag" => structural_tag(v, &field)?,
            // Options of the constraint, not constraints.
            "disable_any_whitespace" | "disable_fallback" | "disable_additional_properties"
            | "whitespace_pattern" => continue,
            _ => {
                return Err(ApiError::invalid_param(
                    field,
                    format!("unsupported structured output `{key}` (use json, json_object, regex, choice, grammar or structural_tag)"),
                ))
            }
        };
        found.push(Requested { spec, field });
    }
    if found.len() > 1 {
        return Err(ApiError::invalid_param(
            "structured_outputs",
            "`structured_outputs` must set exactly one of json, json_object, regex, choice, grammar, structural_tag",
        ));
    }
    Ok(found.pop())
}

/// A schema given as an object (or boolean), or as a string holding one.
fn schema_value(v: &Value, field: &str) -> Result<ConstraintSpec, ApiError> {
    schema_json(v, field).map(ConstraintSpec::JsonSchema)
}

fn schema_json(v: &Value, field: &str) -> Result<Value, ApiError> {
    let schema = match v {
        Value::String(s) => serde_json::from_str::<Value>(s).map_err(|e| {
            ApiError::invalid_param(field, format!("the schema is not valid JSON: {e}"))
        })?,
        other => other.clone(),
    };
    match schema {
        Value::Object(_) | Value::Bool(_) => Ok(schema),
        _ => Err(ApiError::invalid_param(
            field,
            "a JSON schema must be an object",
        )),
    }
}

/// vLLM's structural tag: `{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`
/// (also as a JSON string; a `type` key, as `response_format` carries, is ignored).
fn structural_tag(v: &Value, field: &str) -> Result<ConstraintSpec, ApiError> {
    let parsed;
    let v = match v {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                ApiError::invalid_param(field, format!("the structural tag is not valid JSON: {e}"))
            })?;
            &parsed
        }
        other => other,
    };
    let triggers = strings_of(
        v.get("triggers").unwrap_or(&Value::Null),
        &format!("{field}.triggers"),
    )?;
    if triggers.is_empty() || triggers.iter().any(String::is_empty) {
        return Err(ApiError::invalid_param(
            format!("{field}.triggers"),
            "`triggers` must be a non-empty list of non-empty strings",
        ));
    }
    let list = v
        .get("structures")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ApiError::invalid_param(
                format!("{field}.structures"),
                "`structures` must be a list of {begin, schema, end} objects",
            )
        })?;
    let mut structures = Vec::with_capacity(list.len());
    for (i, s) in list.iter().enumerate() {
        let at = format!("{field}.structures[{i}]");
        let text = |key: &str| {
            s.get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        format!("{at}.{key}"),
                        format!("`{key}` must be a string"),
                    )
                })
        };
        let (begin, end) = (text("begin")?, text("end")?);
        if !triggers
            .iter()
            .any(|t| !t.is_empty() && begin.starts_with(t.as_str()))
        {
            return Err(ApiError::invalid_param(
                format!("{at}.begin"),
                format!("`begin` {begin:?} starts with none of the triggers"),
            ));
        }
        let schema = match s.get("schema").or_else(|| s.get("parameters")) {
            None => serde_json::json!({}),
            Some(v) => schema_json(v, &format!("{at}.schema"))?,
        };
        structures.push(TagStructure { begin, schema, end });
    }
    Ok(ConstraintSpec::StructuralTag(StructuralTag {
        triggers,
        structures,
    }))
}

fn string_of(v: &Value, field: &str) -> Result<String, ApiError> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| ApiError::invalid_param(field, format!("`{field}` must be a string")))
}

fn strings_of(v: &Value, field: &str) -> Result<Vec<String>, ApiError> {
    v.as_array()
        .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| {
            ApiError::invalid_param(field, format!("`{field}` must be a list of strings"))
        })
}

/// Compiles `req` for this model on the blocking pool; errors name `req.field`.
pub async fn compile(state: &AppState, req: Requested) -> Result<Constraint, ApiError> {
    let state = state.clone();
    blocking(move || {
        let compiler = state.grammar_compiler().map_err(|m| {
            ApiError::invalid_param(req.field.clone(), m).with_code("structured_output_unavailable")
        })?;
        if let ConstraintSpec::StructuralTag(tag) = &req.spec {
            // Each structure's schema alone first, so an error names the structure.
            for (i, s) in tag.structures.iter().enumerate() {
                let field = format!("{}.structures[{i}].schema", req.field);
                compiler
                    .compile(&ConstraintSpec::JsonSchema(s.schema.clone()))
                    .map_err(|e| compile_error(&field, e))?;
            }
        }
        compiler
            .compile(&req.spec)
            .map_err(|e| compile_error(&req.field, e))
    })
    .await
}

fn compile_error(field: &str, e: StructuredError) -> ApiError {
    match e {
        StructuredError::Compile(m) => {
            ApiError::invalid_param(field, format!("`{field}` does not compile: {m}"))
        }
        other => ApiError::invalid_param(field, other.to_string()),
    }
}

/// Checks that `req` compiles where this model can constrain at all (tool parameter schemas
/// under `auto`: a model without a grammar engine still serves unenforced tools).
pub async fn check(state: &AppState, req: Requested) -> Result<(), ApiError> {
    if state.grammar_compiler().is_err() {
        return Ok(());
    }
    compile(state, req).await.map(drop)
}
