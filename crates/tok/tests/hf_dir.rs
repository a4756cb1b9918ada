//! `Tokenizer::from_hf_dir`: tokenizer.json plus tokenizer_config.json, chat_template.jinja and
//! generation_config.json.

mod common;

use oxllm_tok::Tokenizer;

fn dir_with(tag: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = common::temp_dir(tag);
    let dir = tmp.path();
    std::fs::copy(
        common::fixtures_dir().join("smollm2/tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    for (name, body) in files {
        std::fs::write(dir.join(name), body).unwrap();
    }
    tmp
}

#[test]
fn tokenizer_json_only() {
    let tok = Tokenizer::from_hf_dir(dir_with("bare", &[]).path()).unwrap();
    assert_eq!(tok.bos_id(), None);
    assert_eq!(
        tok.encode("hi", true).unwrap(),
        tok.encode("hi", false).unwrap()
    );
}

#[test]
fn config_generation_config_and_template() {
    let dir = dir_with(
        "full",
        &[
            (
                "tokenizer_config.json",
                r#"{"bos_token": "<|im_start|>",
                    "eos_token": {"content": "<|im_end|>", "special": true},
                    "add_bos_token": true,
                    "chat_template": "from-config"}"#,
            ),
            (
                "generation_config.json",
                r#"{"eos_token_id": [2, 0], "bos_token_id": 1}"#,
            ),
        ],
    );
    let tok = Tokenizer::from_hf_dir(&dir).unwrap();
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), [2, 0]);
    assert_eq!(tok.chat_template(), Some("from-config"));
    let plain = tok.encode("The capital of France is", false).unwrap();
    assert_eq!(plain, [504, 3575, 282, 4649, 314]);
    assert_eq!(
        tok.encode("The capital of France is", true).unwrap()[..2],
        [1, 504]
    );

    std::fs::write(dir.path().join("chat_template.jinja"), "from-jinja").unwrap();
    let tok = Tokenizer::from_hf_dir(&dir).unwrap();
    assert_eq!(tok.chat_template(), Some("from-jinja"));
}

#[test]
fn named_template_list() {
    let dir = dir_with(
        "named",
        &[(
            "tokenizer_config.json",
            r#"{"chat_template": [{"name": "tool_use", "template": "tools"},
                                  {"name": "default", "template": "chat"}]}"#,
        )],
    );
    let tok = Tokenizer::from_hf_dir(&dir).unwrap();
    assert_eq!(tok.chat_template(), Some("chat"));
    assert!(tok.eos_ids().is_empty());
}
