//! The guard on what a store writes: an interaction's answer (whole bodies, stream events,
//! session frames of both sides, headers) loses its secrets by name, value and shape as its
//! request did when it was keyed; what is still left is refused, named by place and rule.

use crate::format::{ChunkContent, Interaction, ResponseBody};
use crate::secrets::{find_with, Found, Guard};

impl Guard {
    /// Replaces the secrets of the answer, by name, value and shape: a whole body (JSON in its
    /// layout; text, SSE, XML or form as written; bytes that are text once gzip or deflate is
    /// undone, or past the size parsed, read loosely), stream events, session frames of both
    /// sides, text and binary. Returns whether anything changed.
    pub fn redact_answer(&self, interaction: &mut Interaction) -> bool {
        let encoding = interaction
            .response
            .content_encoding()
            .map(str::to_ascii_lowercase);
        let mut decoded = false;
        let mut changed = false;
        match &mut interaction.response.body {
            ResponseBody::Whole(b) => {
                let (c, d) = self.body(b, encoding.as_deref());
                changed |= c;
                decoded |= d;
            }
            ResponseBody::Session(frames) => {
                for f in frames.iter_mut() {
                    changed |= self.body(&mut f.body, None).0;
                    if let Some(close) = &mut f.close {
                        if let Some(t) = self.plain(&close.reason) {
                            close.reason = t;
                            changed = true;
                        }
                    }
                }
            }
            ResponseBody::Stream { chunks, .. } => {
                for chunk in chunks {
                    match &mut chunk.content {
                        ChunkContent::Event { data, .. } => {
                            changed |= !self.fields.json(data).is_empty();
                            changed |= self.scrubber().json(data);
                        }
                        ChunkContent::Raw(text) => {
                            if let Some(t) = self.plain(text) {
                                *text = t;
                                changed = true;
                            }
                        }
                    }
                }
            }
        }
        if decoded {
            // The body is kept decoded now; replay sends it as such.
            let headers = &mut interaction.response.headers;
            headers.remove("content-encoding");
            headers.remove("content-length");
        }
        for value in interaction.response.headers.values_mut() {
            if let Some(t) = self.scrubber().text(value) {
                *value = t;
                changed = true;
            }
        }
        changed |= self.request(&mut interaction.request.body);
        changed
    }

    /// The first secret the interaction, as it would be stored, still holds.
    pub fn check(&self, interaction: &Interaction) -> Option<Found> {
        let value = serde_json::to_value(interaction).ok()?;
        find_with(&value, self.scrubber())
    }
}
