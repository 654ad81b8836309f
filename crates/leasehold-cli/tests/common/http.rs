//! A minimal HTTP/1.1 client over a plain socket: enough to scrape and call the endpoints
//! under test, and to send them requests no well-behaved client would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One response.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header lines, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body, as text.
    pub body: String,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// `host:port` of an `http://host:port/...` URL.
pub fn authority(url: &str) -> &str {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    rest.split('/').next().unwrap()
}

/// Sends `request` as raw bytes and reads the whole response (the request should say
/// `Connection: close`). `None` if the server closed the connection without a response.
pub fn raw(address: &str, request: &[u8]) -> Option<Response> {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The server may answer and close before reading everything sent (a body too large).
    let _ = stream.write_all(request);
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Option<Response> {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A request with `method`, `path`, extra header lines and a body.
pub fn request(address: &str, method: &str, path: &str, headers: &[&str], body: &str) -> Response {
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    // What a program (unlike a web page) sends with every change; the checks against
    // cross-site requests are tested with `raw`.
    if method != "GET" {
        text.push_str("X-Leasehold-Request: 1\r\n");
    }
    text.push_str("\r\n");
    text.push_str(body);
    raw(address, text.as_bytes()).unwrap_or_else(|| panic!("no response to {method} {path}"))
}

/// `GET path`.
pub fn get(address: &str, path: &str) -> Response {
    request(address, "GET", path, &[], "")
}

/// A server-sent event stream being read.
pub struct EventStream {
    reader: BufReader<TcpStream>,
}

/// One event of a stream.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its `event:` name.
    pub name: String,
    /// Its `id:`, if any.
    pub id: Option<String>,
    /// Its data lines, joined.
    pub data: String,
}

impl EventStream {
    /// Opens `GET path` as a stream.
    pub fn open(address: &str, path: &str) -> EventStream {
        EventStream::open_with(address, path, &[])
    }

    /// Opens `GET path` as a stream, sending `headers` too.
    #[allow(dead_code)]
    pub fn open_with(address: &str, path: &str, headers: &[&str]) -> EventStream {
        let mut stream = TcpStream::connect(address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n{extra}\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.contains(" 200 "), "stream refused: {line}");
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
        EventStream { reader }
    }

    /// The next event (comments and chunk sizes skipped).
    pub fn next(&mut self) -> Event {
        let mut event = Event {
            name: "message".into(),
            id: None,
            data: String::new(),
        };
        let mut line = String::new();
        loop {
            line.clear();
            let read = self.reader.read_line(&mut line).expect("read the stream");
            assert!(read > 0, "the stream ended");
            let text = line.trim_end_matches(['\r', '\n']);
            if let Some(name) = text.strip_prefix("event:") {
                event.name = name.trim().to_string();
            } else if let Some(id) = text.strip_prefix("id:") {
                event.id = Some(id.trim().to_string());
            } else if let Some(data) = text.strip_prefix("data:") {
                event.data.push_str(data.strip_prefix(' ').unwrap_or(data));
            } else if text.is_empty() && !event.data.is_empty() {
                return event;
            }
        }
    }
}
