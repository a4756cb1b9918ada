//! Admission checks of the grammar compiler on SmolLM2's vocabulary: grammars that never
//! terminate and schemas with features the engine cannot enforce are compile errors (the
//! server turns them into 400s), while recursive grammars that can finish still compile.

use std::path::PathBuf;

use oxllm_structured::{
    ConstraintSpec, GrammarCompiler, StructuralTag, StructuredError, TagStructure,
};
use oxllm_tok::Tokenizer;
use serde_json::json;

/// SmolLM2's committed tokenizer with `<|im_end|>` as its end of sequence.
fn tokenizer() -> Tokenizer {
    // Tests run in parallel threads: each call gets its own folder, or one test could read the
    // tokenizer while another is rewriting it.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!(
        "oxllm-structured-tok-{}-{call}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        repo.join("tests/fixtures/tok/smollm2/tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": "<|im_end|>"}"#,
    )
    .unwrap();
    let tok = Tokenizer::from_hf_dir(&dir).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    tok
}

fn compiler() -> GrammarCompiler {
    let tok = tokenizer();
    GrammarCompiler::new(&tok, tok.vocab_size()).unwrap()
}

fn compile_error(c: &GrammarCompiler, spec: ConstraintSpec) -> String {
    match c.compile(&spec) {
        Err(StructuredError::Compile(m)) => m,
        Err(other) => panic!("{spec:?}: expected a compile error, got {other:?}"),
        Ok(_) => panic!("{spec:?}: compiled, expected an error"),
    }
}

#[test]
fn grammars_that_never_terminate_are_rejected() {
    let c = compiler();
    for g in [
        "start: \"a\" start",
        "start: x\nx: \"a\" y\ny: \"b\" x",
        "start: \"(\" start \")\" | \"[\" start \"]\"",
    ] {
        let m = compile_error(&c, ConstraintSpec::Lark(g.into()));
        assert!(m.contains("never terminates"), "{g}: {m}");
    }
    let endless = json!({
        "type": "object",
        "properties": {"next": {"$ref": "#"}},
        "required": ["next"],
    });
    let m = compile_error(&c, ConstraintSpec::JsonSchema(endless));
    assert!(m.contains("never terminates"), "{m}");
}

#[test]
fn recursive_grammars_that_can_finish_compile() {
    let c = compiler();
    for g in [
        "start: \"a\" start | \"b\"",
        "start: \"(\" start \")\" | \"x\"",
        "start: item+\nitem: /[a-z]+/ \";\"",
    ] {
        c.compile(&ConstraintSpec::Lark(g.into()))
            .unwrap_or_else(|e| panic!("{g}: {e}"));
    }
    let tree = json!({
        "type": "object",
        "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#"}},
        },
        "required": ["value"],
    });
    c.compile(&ConstraintSpec::JsonSchema(tree)).unwrap();
    c.compile(&ConstraintSpec::Regex("[0-9]+".into())).unwrap();
    c.compile(&ConstraintSpec::Choice(vec!["yes".into(), "no".into()]))
        .unwrap();
}

#[test]
fn unsupported_schema_features_are_named() {
    let c = compiler();
    for (schema, named) in [
        (json!({"not": {"type": "string"}}), "not"),
        (
            json!({"if": {"type": "string"}, "then": {"maxLength": 3}}),
            "if",
        ),
        (
            json!({"type": "object", "dependentRequired": {"a": ["b"]}}),
            "dependentRequired",
        ),
        (
            json!({"type": "string", "format": "bogus-format"}),
            "bogus-format",
        ),
        (json!({"$ref": "https://example.com/schema.json"}), "$ref"),
        (
            json!({"type": "integer", "minimum": 5, "maximum": 1}),
            "minimum",
        ),
    ] {
        let m = compile_error(&c, ConstraintSpec::JsonSchema(schema.clone()));
        assert!(m.contains(named), "{schema}: {m}");
    }
}

/// Whether `c` lets `text` (as the tokenizer encodes it) be generated and then end.
fn allows(c: &mut oxllm_structured::Constraint, tok: &Tokenizer, text: &str) -> bool {
    let eos = tok.eos_ids()[0];
    let mut mask = vec![0u32; c.mask_words()];
    let allowed = |mask: &[u32], t: u32| mask[t as usize / 32] & (1 << (t % 32)) != 0;
    for t in tok.encode(text, false).unwrap() {
        c.fill_mask(&mut mask).unwrap();
        if !allowed(&mask, t) {
            return false;
        }
        c.advance(t).unwrap();
    }
    c.fill_mask(&mut mask).unwrap();
    allowed(&mask, eos)
}

#[test]
fn structural_tags_constrain_only_what_follows_a_trigger() {
    let tok = tokenizer();
    let c = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let city = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": false,
    });
    let tag = ConstraintSpec::StructuralTag(StructuralTag {
        triggers: vec!["<function=".into()],
        structures: vec![
            TagStructure {
                begin: "<function=get_weather>".into(),
                schema: city.clone(),
                end: "</function>".into(),
            },
            TagStructure {
                begin: "<function=get_time>".into(),
                schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
                end: "</function>".into(),
            },
        ],
    });
    let fresh = || c.compile(&tag).unwrap();
    assert!(allows(&mut fresh(), &tok, "Just text, no call at all."));
    assert!(allows(
        &mut fresh(),
        &tok,
        "Let me look. <function=get_weather>{\"city\": \"Paris\"}</function> and <function=get_time>{}</function> done."
    ));
    // A trigger commits the output to a structure: an unknown name, a bad argument or a
    // missing end is not allowed.
    assert!(!allows(
        &mut fresh(),
        &tok,
        "x <function=get_news>{}</function>"
    ));
    assert!(!allows(
        &mut fresh(),
        &tok,
        "x <function=get_weather>{\"town\": \"Paris\"}</function>"
    ));
    assert!(!allows(
        &mut fresh(),
        &tok,
        "x <function=get_weather>{\"city\": \"Paris\"}"
    ));
    // A begin that no trigger starts is a compile error.
    let bad = ConstraintSpec::StructuralTag(StructuralTag {
        triggers: vec!["<tool>".into()],
        structures: vec![TagStructure {
            begin: "<function=f>".into(),
            schema: json!({}),
            end: "</function>".into(),
        }],
    });
    assert!(compile_error(&c, bad).contains("none of the triggers"));
}

/// `oxllm bench` divides these counters into per-token times, so each must count exactly
/// its own calls: a mask per `fill_mask`, an advance per consumed token, none for EOS (which
/// ends the request without reaching the grammar).
#[test]
fn stats_count_each_mask_and_each_grammar_advance() {
    let tok = tokenizer();
    let c = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let mut con = c
        .compile(&ConstraintSpec::Choice(vec!["yes".into(), "no".into()]))
        .unwrap();
    assert_eq!(con.stats(), oxllm_structured::MaskStats::default());
    let ids = tok.encode("yes", false).unwrap();
    assert!(allows(&mut con, &tok, "yes"));
    con.advance(tok.eos_ids()[0]).unwrap();
    let s = con.stats();
    assert_eq!(s.masks, ids.len() as u64 + 1);
    assert_eq!(s.advances, ids.len() as u64);
    assert!(s.seconds > 0.0 && s.advance_seconds > 0.0, "{s:?}");
}
