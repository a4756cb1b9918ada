//! Stop strings over streamed text: every split of the text into deltas gives the same output as a
//! straightforward reference, which cuts before the first stop string to complete.

use oxllm_sample::StopChecker;
use proptest::prelude::*;

/// Reference: scan the full text char by char, stop at the first end position where some stop
/// string ends (the longest such one, i.e. earliest start; lowest index among equal strings).
fn reference(text: &str, stops: &[&str]) -> (String, Option<usize>) {
    let ends = text.char_indices().map(|(i, c)| i + c.len_utf8());
    for e in ends {
        let prefix = &text[..e];
        let mut best: Option<(usize, usize)> = None; // (start, index)
        for (i, s) in stops.iter().enumerate() {
            if !s.is_empty() && prefix.ends_with(s) {
                let start = e - s.len();
                if !matches!(best, Some(b) if b.0 <= start) {
                    best = Some((start, i));
                }
            }
        }
        if let Some((start, i)) = best {
            return (text[..start].to_owned(), Some(i));
        }
    }
    (text.to_owned(), None)
}

/// Runs the checker over `deltas`, checking that the emitted text only ever grows as a prefix of
/// the expected output, and that matching took at most two automaton steps per byte pushed.
fn run(deltas: &[&str], stops: &[&str], expected: &str) -> (String, Option<usize>) {
    let mut c = StopChecker::new(stops);
    let mut out = String::new();
    let mut stopped = None;
    let mut pushed = 0u64;
    for d in deltas {
        let o = c.push(d);
        if c.stopped().is_none() || o.stopped.is_some() {
            pushed += d.len() as u64;
        }
        assert!(
            c.steps() <= 2 * pushed,
            "{} steps for {pushed} bytes",
            c.steps()
        );
        out.push_str(&o.text);
        assert!(
            expected.starts_with(&out),
            "emitted {out:?} beyond {expected:?}"
        );
        if o.stopped.is_some() {
            stopped = o.stopped;
        }
    }
    out.push_str(&c.finish());
    (out, stopped)
}

fn boundaries(text: &str) -> Vec<usize> {
    let mut b: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    b.push(text.len());
    b
}

/// Checks one text against the reference for: one delta, char-by-char, every 2-way and 3-way
/// split at char boundaries.
fn check_all_splits(text: &str, stops: &[&str]) {
    let want = reference(text, stops);
    assert_eq!(run(&[text], stops, &want.0), want, "whole {text:?}");
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(run(&chars, stops, &want.0), want, "char by char {text:?}");
    let b = boundaries(text);
    for &i in &b {
        for &j in b.iter().filter(|&&j| j >= i) {
            let parts = [&text[..i], &text[i..j], &text[j..]];
            assert_eq!(run(&parts, stops, &want.0), want, "{parts:?} / {stops:?}");
        }
    }
}

#[test]
fn stop_split_at_every_point() {
    check_all_splits("Hello world, STOP here STOP again", &["STOP"]);
    assert_eq!(
        reference("Hello world, STOP here", &["STOP"]),
        ("Hello world, ".to_owned(), Some(0))
    );
}

#[test]
fn overlapping_candidates() {
    // "ab" completes before "abc" could: cut before "ab".
    check_all_splits("xxabcd", &["abc", "ab"]);
    assert_eq!(
        reference("xxabcd", &["abc", "ab"]),
        ("xx".to_owned(), Some(1))
    );
    check_all_splits("xxabcd", &["ab", "abc"]);
    // "bc" completes before "abcd" would: cut before "bc".
    check_all_splits("zabcd", &["abcd", "bc"]);
    assert_eq!(
        reference("zabcd", &["abcd", "bc"]),
        ("za".to_owned(), Some(1))
    );
    // Same end: the earlier start (longer string) wins.
    check_all_splits("zabc", &["bc", "abc"]);
    assert_eq!(reference("zabc", &["bc", "abc"]), ("z".to_owned(), Some(1)));
    // Self-overlapping stop string and a partial match that fails first.
    check_all_splits("aaab aab", &["aab"]);
    check_all_splits("ababac", &["abac"]);
}

#[test]
fn multiple_stop_strings() {
    check_all_splits("one two three four", &["four", "three", "xyz"]);
    assert_eq!(
        reference("one two three four", &["four", "three", "xyz"]),
        ("one two ".to_owned(), Some(1))
    );
    check_all_splits("no stop in here", &["zz", "qq"]);
}

#[test]
fn stop_at_very_start() {
    check_all_splits("STOPafter", &["STOP"]);
    let mut c = StopChecker::new(&["STOP"]);
    let o = c.push("STOP");
    assert_eq!(o.text, "");
    assert_eq!(o.stopped, Some(0));
    assert_eq!(c.push("more").text, "");
    assert_eq!(c.finish(), "");
}

#[test]
fn unicode_stop_strings() {
    check_all_splits("これで終わりです。", &["終わり"]);
    check_all_splits("café crème brûlée", &["è", "ûl"]);
    check_all_splits("emoji 🎉🎉 party", &["🎉🎉 p"]);
    assert_eq!(
        reference("これで終わりです。", &["終わり"]),
        ("これで".to_owned(), Some(0))
    );
}

#[test]
fn held_text_is_flushed_at_finish() {
    let mut c = StopChecker::new(&["</s>"]);
    let o = c.push("answer </");
    assert_eq!(o.text, "answer ");
    assert_eq!(c.finish(), "</");
}

#[test]
fn empty_stop_strings_are_ignored() {
    let mut c = StopChecker::new(&["", "x"]);
    let o = c.push("abxc");
    assert_eq!(o.text, "ab");
    assert_eq!(o.stopped, Some(1));
}

fn text_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(prop::sample::select(vec!['a', 'b', 'c', 'é', '終']), 0..14)
        .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #[test]
    fn random_texts_match_reference(
        text in text_strategy(),
        stops in proptest::collection::vec(text_strategy(), 1..4),
        cuts in proptest::collection::vec(0usize..20, 0..6),
    ) {
        let stops: Vec<&str> = stops.iter().map(String::as_str).collect();
        let want = reference(&text, &stops);
        // Split at the chosen char boundaries.
        let b = boundaries(&text);
        let mut at: Vec<usize> = cuts.iter().map(|&c| b[c % b.len()]).collect();
        at.push(0);
        at.push(text.len());
        at.sort_unstable();
        let parts: Vec<&str> = at.windows(2).map(|w| &text[w[0]..w[1]]).collect();
        prop_assert_eq!(run(&parts, &stops, &want.0), want);
    }
}

/// The largest legal stop list, built to keep a long match in progress (64 strings of 64 bytes
/// that all share the text's prefix and differ in their last byte), costs the same bounded
/// work per byte as one short stop string: matching never rescans the held text.
#[test]
fn the_largest_stop_list_costs_at_most_two_steps_per_byte() {
    use oxllm_sample::{MAX_STOP_BYTES, MAX_STOP_STRINGS};
    let len = MAX_STOP_BYTES / MAX_STOP_STRINGS;
    let stops: Vec<String> = (0..MAX_STOP_STRINGS)
        .map(|i| "a".repeat(len - 1) + &char::from(b'!' + i as u8).to_string())
        .collect();
    let text = "a".repeat(10_000);
    for list in [&stops[..], &stops[..1]] {
        let mut c = StopChecker::new(list);
        let mut out = String::new();
        for ch in text.as_bytes().chunks(3) {
            out.push_str(&c.push(std::str::from_utf8(ch).unwrap()).text);
        }
        assert_eq!(c.held().len(), len - 1);
        assert!(c.steps() <= 2 * text.len() as u64, "{}", c.steps());
        out.push_str(&c.finish());
        assert_eq!(out, text);
    }
}
