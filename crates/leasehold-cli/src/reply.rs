//! What a command that changes the table reports: its lines of text as they come, or with
//! `--json` one JSON object once it has finished, for a script to read.

use serde::Serialize;
use serde_json::{Map, Value};

/// A command's report, in text or JSON.
pub struct Reply {
    json: bool,
    fields: Map<String, Value>,
}

impl Reply {
    /// A report in JSON if `json`, in text otherwise.
    pub fn new(json: bool) -> Reply {
        Reply {
            json,
            fields: Map::new(),
        }
    }

    /// A line for a person; printed at once in text, left out of JSON (whose fields say the
    /// same).
    pub fn say(&mut self, line: &str) -> anyhow::Result<()> {
        if self.json {
            return Ok(());
        }
        crate::say(line)
    }

    /// A field of the JSON object; nothing in text.
    pub fn set(&mut self, key: &str, value: impl Serialize) -> anyhow::Result<()> {
        self.fields
            .insert(key.to_owned(), serde_json::to_value(value)?);
        Ok(())
    }

    /// Prints the JSON object, if the report is in JSON.
    pub fn finish(self) -> anyhow::Result<()> {
        if !self.json {
            return Ok(());
        }
        crate::say(&serde_json::to_string_pretty(&Value::Object(self.fields))?)
    }
}
