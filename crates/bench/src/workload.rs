//! The requests a run sends: seeded random prompts built from a fixed word list (so token counts
//! are close to word counts for common BPE vocabularies; the server's `usage` reports the real
//! counts), an optional shared prefix, or a JSONL dataset of `{"prompt", "max_tokens"}` lines.
//!
//! Random workloads are drawn afresh for every run: the seed of a run's prompts mixes the
//! workload's seed with the run's repetition and load ([`run_seed`]), so no server cache
//! answers a run from an earlier one (unless the workload says so: `--prefix-len` shares a
//! prefix between the requests of one run, which measures caching on purpose), while the same
//! seed, repetition and load always give the same prompts, and both servers of an A/B run get
//! the same ones. Datasets are sent as they are in every run.

use std::path::Path;

use crate::error::{BenchError, Result};

/// One request of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub index: usize,
    pub text: String,
    pub max_tokens: usize,
}

/// Common English words, each a single token (with its leading space) in GPT-2-style vocabularies.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its", "may",
    "these", "what", "them", "than", "some", "him", "time", "into", "only", "do", "new", "about",
    "two", "first", "then", "also", "any", "like", "our", "could", "made", "after", "over", "such",
    "work", "life", "people", "world", "water", "house", "light", "music", "city", "river",
    "story", "small", "great", "old", "long", "little", "good", "day", "year", "way", "man",
    "woman", "child", "school", "book", "road", "tree", "sun", "moon", "sea", "land", "fire",
    "king", "game", "war", "part", "place", "case", "week", "number", "group", "home", "hand",
    "night", "point", "word", "family", "power", "money", "state", "car", "food", "line", "name",
    "market", "table", "paper", "course", "high", "under", "last", "never", "down", "found",
    "still", "between", "each", "much", "back", "well", "own", "here", "where", "most", "before",
    "through", "many", "very", "even", "how", "same", "while", "under", "end",
];

/// splitmix64: a tiny seeded generator, enough for reproducible prompts and arrival times.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `n` words drawn from the word list (the first capitalised).
pub fn random_words(rng: &mut SplitMix64, n: usize) -> String {
    let mut s = String::with_capacity(n * 6);
    for i in 0..n {
        let w = WORDS[rng.below(WORDS.len())];
        if i > 0 {
            s.push(' ');
            s.push_str(w);
        } else {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                s.extend(f.to_uppercase());
                s.push_str(c.as_str());
            }
        }
    }
    s
}

/// Random prompts: a shared prefix of `prefix_len` words (drawn once) then `input_len` words
/// drawn per request; the same seed gives the same prompts.
pub fn random_prompts(
    num: usize,
    input_len: usize,
    output_len: usize,
    prefix_len: usize,
    seed: u64,
) -> Vec<Prompt> {
    let mut rng = SplitMix64::new(seed);
    let prefix = random_words(&mut rng, prefix_len);
    (0..num)
        .map(|index| {
            let body = random_words(&mut rng, input_len);
            let text = match (prefix.is_empty(), body.is_empty()) {
                (true, _) => body,
                (false, true) => prefix.clone(),
                (false, false) => format!("{prefix} {}", body.to_lowercase()),
            };
            Prompt {
                index,
                text,
                max_tokens: output_len,
            }
        })
        .collect()
}

/// A random workload: `num` prompts of `input_len` words, `prefix_len` of them shared by the
/// prompts of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandomSpec {
    pub num: usize,
    pub input_len: usize,
    pub output_len: usize,
    pub prefix_len: usize,
    pub seed: u64,
}

/// Where each run's prompts come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// The same prompts in every run (a dataset, or random prompts drawn once on request).
    Fixed(Vec<Prompt>),
    /// Random prompts drawn afresh for every run.
    Fresh(RandomSpec),
}

/// Which run a set of prompts is for: the repetition (as recorded) and the load (the
/// concurrency, or the bits of a request rate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunKey {
    pub repetition: usize,
    pub load: u64,
}

impl RunKey {
    /// The warm-up requests' key: no measured run draws it.
    pub const WARMUP: RunKey = RunKey {
        repetition: usize::MAX,
        load: u64::MAX,
    };
}

/// The seed of one run's prompts: the workload's seed mixed with the run's repetition and load
/// (splitmix64 steps, so nearby keys give unrelated seeds).
pub fn run_seed(seed: u64, run: RunKey) -> u64 {
    let mut h = SplitMix64::new(seed).next_u64();
    h = SplitMix64::new(h ^ run.repetition as u64).next_u64();
    SplitMix64::new(h ^ run.load).next_u64()
}

impl Workload {
    /// The prompts of one run.
    pub fn prompts_for(&self, run: RunKey) -> Vec<Prompt> {
        match self {
            Workload::Fixed(p) => p.clone(),
            Workload::Fresh(r) => random_prompts(
                r.num,
                r.input_len,
                r.output_len,
                r.prefix_len,
                run_seed(r.seed, run),
            ),
        }
    }

    /// The seed a run's prompts were drawn with (`None` for fixed prompts).
    pub fn seed_for(&self, run: RunKey) -> Option<u64> {
        match self {
            Workload::Fixed(_) => None,
            Workload::Fresh(r) => Some(run_seed(r.seed, run)),
        }
    }

    /// Prompts per run.
    pub fn len(&self) -> usize {
        match self {
            Workload::Fixed(p) => p.len(),
            Workload::Fresh(r) => r.num,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Vec<Prompt>> for Workload {
    fn from(p: Vec<Prompt>) -> Self {
        Workload::Fixed(p)
    }
}

/// Reads a JSONL dataset: each non-blank line an object with a string `prompt` and an integer
/// `max_tokens` (`default_max_tokens` when absent). Takes the first `num` lines (all if `None`).
pub fn load_dataset(
    path: &Path,
    num: Option<usize>,
    default_max_tokens: usize,
) -> Result<Vec<Prompt>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if num.is_some_and(|n| out.len() >= n) {
            break;
        }
        let err = |reason: String| BenchError::Dataset {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| err(format!("not JSON: {e}")))?;
        let prompt = v
            .get("prompt")
            .and_then(|p| p.as_str())
            .ok_or_else(|| err("no string \"prompt\"".into()))?;
        let max_tokens = match v.get("max_tokens") {
            None | Some(serde_json::Value::Null) => default_max_tokens,
            Some(m) => m
                .as_u64()
                .filter(|&m| m >= 1)
                .ok_or_else(|| err("\"max_tokens\" must be an integer >= 1".into()))?
                as usize,
        };
        out.push(Prompt {
            index: out.len(),
            text: prompt.to_string(),
            max_tokens,
        });
    }
    if out.is_empty() {
        return Err(BenchError::Dataset {
            path: path.to_path_buf(),
            line: 0,
            reason: "no prompts".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_prompts_are_reproducible_and_sized() {
        let a = random_prompts(8, 32, 16, 0, 7);
        let b = random_prompts(8, 32, 16, 0, 7);
        assert_eq!(a, b);
        assert_ne!(a, random_prompts(8, 32, 16, 0, 8));
        for p in &a {
            assert_eq!(p.text.split(' ').count(), 32);
            assert_eq!(p.max_tokens, 16);
        }
        let distinct: std::collections::HashSet<_> = a.iter().map(|p| &p.text).collect();
        assert_eq!(distinct.len(), 8);
    }

    #[test]
    fn shared_prefix() {
        let ps = random_prompts(4, 10, 4, 20, 1);
        let prefix: Vec<&str> = ps[0].text.split(' ').take(20).collect();
        for p in &ps {
            let words: Vec<&str> = p.text.split(' ').collect();
            assert_eq!(words.len(), 30);
            assert_eq!(&words[..20], &prefix[..]);
        }
    }

    fn spec(prefix_len: usize, seed: u64) -> Workload {
        Workload::Fresh(RandomSpec {
            num: 6,
            input_len: 12,
            output_len: 4,
            prefix_len,
            seed,
        })
    }

    fn key(repetition: usize, load: u64) -> RunKey {
        RunKey { repetition, load }
    }

    #[test]
    fn fresh_prompts_differ_across_runs_and_repeat_for_the_same_seed() {
        let w = spec(0, 3);
        let runs = [
            key(0, 1),
            key(0, 8),
            key(0, 16),
            key(1, 1),
            key(1, 8),
            key(2, 16),
        ];
        let mut seen = std::collections::HashSet::new();
        for &run in &runs {
            let ps = w.prompts_for(run);
            assert_eq!(ps.len(), 6);
            assert_eq!(ps, w.prompts_for(run), "same seed and run, same prompts");
            assert_eq!(ps, spec(0, 3).prompts_for(run));
            for p in ps {
                assert!(seen.insert(p.text), "a prompt repeated across runs");
            }
        }
        for p in w.prompts_for(RunKey::WARMUP) {
            assert!(!seen.contains(&p.text), "warm-up reused a measured prompt");
        }
        assert_ne!(w.prompts_for(key(0, 1)), spec(0, 4).prompts_for(key(0, 1)));
        assert_ne!(w.seed_for(key(0, 1)), w.seed_for(key(1, 0)));
    }

    #[test]
    fn fresh_prefix_is_shared_within_a_run_only() {
        let w = spec(20, 0);
        let prefix_of = |run| -> Vec<String> {
            let ps = w.prompts_for(run);
            let first: Vec<String> = ps[0].text.split(' ').take(20).map(String::from).collect();
            for p in &ps {
                let words: Vec<&str> = p.text.split(' ').collect();
                assert_eq!(words.len(), 32);
                assert_eq!(words[..20], first[..]);
            }
            first
        };
        assert_ne!(prefix_of(key(0, 1)), prefix_of(key(0, 8)));
        assert_ne!(prefix_of(key(0, 1)), prefix_of(key(1, 1)));
    }

    #[test]
    fn fixed_prompts_are_the_same_in_every_run() {
        let ps = random_prompts(3, 5, 2, 0, 9);
        let w = Workload::from(ps.clone());
        assert_eq!(w.prompts_for(key(0, 1)), ps);
        assert_eq!(w.prompts_for(key(5, 16)), ps);
        assert_eq!(w.seed_for(key(0, 1)), None);
    }

    #[test]
    fn dataset_lines() {
        let dir = std::env::temp_dir().join(format!("oxllm-bench-ds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d.jsonl");
        std::fs::write(
            &p,
            "{\"prompt\":\"a\",\"max_tokens\":3}\n\n{\"prompt\":\"b\"}\n",
        )
        .unwrap();
        let ds = load_dataset(&p, None, 9).unwrap();
        assert_eq!(ds.len(), 2);
        assert_eq!((ds[0].max_tokens, ds[1].max_tokens), (3, 9));
        assert_eq!(load_dataset(&p, Some(1), 9).unwrap().len(), 1);
        std::fs::write(&p, "{\"prompt\":\"a\"}\n{\"max_tokens\":3}\n").unwrap();
        let e = load_dataset(&p, None, 9).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        std::fs::write(&p, "{\"prompt\":\"a\",\"max_tokens\":0}\n").unwrap();
        assert!(load_dataset(&p, None, 9).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
