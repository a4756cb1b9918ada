//! A hand-written progress bar on stderr: redrawn in place on a terminal, one summary line per
//! run otherwise (so logs stay readable).

use std::io::{IsTerminal, Write};
use std::time::Instant;

pub struct Progress {
    label: String,
    total: usize,
    done: usize,
    failed: usize,
    start: Instant,
    tty: bool,
    enabled: bool,
}

impl Progress {
    pub fn new(label: String, total: usize, enabled: bool) -> Self {
        let p = Progress {
            label,
            total,
            done: 0,
            failed: 0,
            start: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            enabled,
        };
        p.draw();
        p
    }

    pub fn tick(&mut self, ok: bool) {
        self.done += 1;
        if !ok {
            self.failed += 1;
        }
        self.draw();
    }

    fn line(&self) -> String {
        const WIDTH: usize = 30;
        let filled = (self.done * WIDTH).checked_div(self.total).unwrap_or(WIDTH);
        format!(
            "{} [{}{}] {}/{} failed {} {:.1} s",
            self.label,
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            self.done,
            self.total,
            self.failed,
            self.start.elapsed().as_secs_f64()
        )
    }

    fn draw(&self) {
        if self.enabled && self.tty {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r{}\x1b[K", self.line());
            let _ = e.flush();
        }
    }

    pub fn finish(&self) {
        if !self.enabled {
            return;
        }
        if self.tty {
            eprintln!();
        } else {
            eprintln!("{}", self.line());
        }
    }
}
