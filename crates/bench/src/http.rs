//! A minimal HTTP/1.1 client over `tokio::net`: one connection per request (`Connection: close`),
//! JSON POST and GET, and a body reader that hands out bytes as they arrive (chunked,
//! `Content-Length` or read-to-close bodies). Enough for OpenAI-compatible servers on loopback;
//! no TLS, no redirects.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::error::{BenchError, Result};

/// `http://host[:port][/base]`; the base path is prefixed to request paths.
#[derive(Clone, Debug, PartialEq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub base_path: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url> {
        let err = |reason: &str| BenchError::Url {
            url: s.to_string(),
            reason: reason.to_string(),
        };
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| err("only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(err("no host"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                let port = p.parse::<u16>().map_err(|_| err("bad port"))?;
                (h.to_string(), port)
            }
            _ => (authority.to_string(), 80),
        };
        if host.is_empty() {
            return Err(err("no host"));
        }
        Ok(Url {
            host,
            port,
            base_path: path.trim_end_matches('/').to_string(),
        })
    }

    pub fn path(&self, p: &str) -> String {
        format!("{}{}", self.base_path, p)
    }

    fn host_header(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.base_path)
    }
}

enum BodyMode {
    /// Chunked: bytes left in the current chunk; `None` before a size line.
    Chunked {
        left: Option<usize>,
        done: bool,
    },
    Length(usize),
    Close {
        done: bool,
    },
}

/// A response whose status and headers are read; the body is read incrementally.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    mode: BodyMode,
}

/// Headers larger than this are a protocol error (keeps a broken server from growing memory).
const MAX_HEAD: usize = 64 * 1024;

pub async fn post_json(url: &Url, path: &str, body: &[u8]) -> Result<Response> {
    request(url, "POST", path, Some(body)).await
}

pub async fn get(url: &Url, path: &str) -> Result<Response> {
    request(url, "GET", path, None).await
}

async fn request(url: &Url, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response> {
    let stream = TcpStream::connect((url.host.as_str(), url.port)).await?;
    stream.set_nodelay(true)?;
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: oxllm-bench\r\nAccept: */*\r\nConnection: close\r\n",
        url.path(path),
        url.host_header()
    );
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut reader = BufReader::new(stream);
    {
        let s = reader.get_mut();
        s.write_all(head.as_bytes()).await?;
        if let Some(b) = body {
            s.write_all(b).await?;
        }
        s.flush().await?;
    }
    let (status, headers) = read_head(&mut reader).await?;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let mode = if header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        BodyMode::Chunked {
            left: None,
            done: false,
        }
    } else if let Some(len) = header("content-length") {
        let n = len
            .trim()
            .parse::<usize>()
            .map_err(|_| BenchError::Protocol(format!("bad Content-Length {len:?}")))?;
        BodyMode::Length(n)
    } else {
        BodyMode::Close { done: false }
    };
    Ok(Response {
        status,
        headers,
        reader,
        mode,
    })
}

async fn read_head(r: &mut BufReader<TcpStream>) -> Result<(u16, Vec<(String, String)>)> {
    let mut total = 0usize;
    let mut line = String::new();
    // Skip interim 1xx responses.
    loop {
        let status_line = read_line(r, &mut line, &mut total).await?;
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        if !version.starts_with("HTTP/1.") {
            return Err(BenchError::Protocol(format!(
                "bad status line {status_line:?}"
            )));
        }
        let status = parts
            .next()
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| BenchError::Protocol(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let l = read_line(r, &mut line, &mut total).await?;
            if l.is_empty() {
                break;
            }
            let (k, v) = l
                .split_once(':')
                .ok_or_else(|| BenchError::Protocol(format!("bad header line {l:?}")))?;
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        if (100..200).contains(&status) {
            continue;
        }
        return Ok((status, headers));
    }
}

async fn read_line(
    r: &mut BufReader<TcpStream>,
    line: &mut String,
    total: &mut usize,
) -> Result<String> {
    line.clear();
    let n = r.read_line(line).await?;
    if n == 0 {
        return Err(BenchError::Protocol(
            "connection closed inside the response head".into(),
        ));
    }
    *total += n;
    if *total > MAX_HEAD {
        return Err(BenchError::Protocol("response head too large".into()));
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

impl Response {
    /// The next bytes of the body as they arrive; `None` at its end.
    pub async fn next_bytes(&mut self) -> Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; 16 * 1024];
        match &mut self.mode {
            BodyMode::Length(0) => Ok(None),
            BodyMode::Length(left) => {
                let want = (*left).min(buf.len());
                let n = self.reader.read(&mut buf[..want]).await?;
                if n == 0 {
                    return Err(BenchError::Protocol(
                        "connection closed before Content-Length bytes".into(),
                    ));
                }
                *left -= n;
                buf.truncate(n);
                Ok(Some(buf))
            }
            BodyMode::Close { done: true } => Ok(None),
            BodyMode::Close { done } => {
                let n = self.reader.read(&mut buf).await?;
                if n == 0 {
                    *done = true;
                    return Ok(None);
                }
                buf.truncate(n);
                Ok(Some(buf))
            }
            BodyMode::Chunked { done: true, .. } => Ok(None),
            BodyMode::Chunked { left, done } => loop {
                match left {
                    Some(0) => {
                        // CRLF after a chunk's data.
                        let mut crlf = String::new();
                        self.reader.read_line(&mut crlf).await?;
                        *left = None;
                    }
                    Some(l) => {
                        let want = (*l).min(buf.len());
                        let n = self.reader.read(&mut buf[..want]).await?;
                        if n == 0 {
                            return Err(BenchError::Protocol(
                                "connection closed inside a chunk".into(),
                            ));
                        }
                        *l -= n;
                        buf.truncate(n);
                        return Ok(Some(buf));
                    }
                    None => {
                        let mut size_line = String::new();
                        if self.reader.read_line(&mut size_line).await? == 0 {
                            return Err(BenchError::Protocol(
                                "connection closed before the last chunk".into(),
                            ));
                        }
                        let hex = size_line.trim().split(';').next().unwrap_or_default();
                        let size = usize::from_str_radix(hex.trim(), 16).map_err(|_| {
                            BenchError::Protocol(format!("bad chunk size line {size_line:?}"))
                        })?;
                        if size == 0 {
                            *done = true;
                            return Ok(None);
                        }
                        *left = Some(size);
                    }
                }
            },
        }
    }

    /// Reads the rest of the body (bounded by `limit` bytes).
    pub async fn read_all(&mut self, limit: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(b) = self.next_bytes().await? {
            out.extend_from_slice(&b);
            if out.len() > limit {
                return Err(BenchError::Protocol(format!(
                    "response body over {limit} bytes"
                )));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = Url::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.base_path.as_str()),
            ("127.0.0.1", 8000, "")
        );
        let u = Url::parse("http://localhost/api/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.base_path.as_str()),
            ("localhost", 80, "/api")
        );
        assert_eq!(u.path("/v1/completions"), "/api/v1/completions");
        assert!(Url::parse("https://x").is_err());
        assert!(Url::parse("http://:80").is_err());
        assert!(Url::parse("http://h:notaport").is_err());
    }
}
