//! Content negotiation: what an `Accept` header asks for, read once by one parser.
//!
//! ```text
//!  Accept ─► media_ranges() ─► MediaRange { type/subtype, g, v, as, q }
//!     ├─► discovery::negotiate(): aggregated v2 | v2beta1 | legacy documents
//!     └─► shape(): objects | Table (as=Table;g=meta.k8s.io) |
//!                  metadata alone (as=PartialObjectMetadata[List];g=meta.k8s.io;v=…)
//! ```

/// One media range of an `Accept` header.
pub(crate) struct MediaRange {
    pub(crate) kind: String,
    pub(crate) subtype: String,
    /// The `g`, `v`, `as` parameters, if any of them is present.
    pub(crate) target: Option<(Option<String>, Option<String>, Option<String>)>,
    pub(crate) quality: f32,
}

impl MediaRange {
    pub(crate) fn parse(text: &str) -> Option<MediaRange> {
        let mut parts = text.split(';');
        let (kind, subtype) = parts.next()?.trim().split_once('/')?;
        let (kind, subtype) = (
            kind.trim().to_ascii_lowercase(),
            subtype.trim().to_ascii_lowercase(),
        );
        if kind.is_empty() || subtype.is_empty() || (kind == "*" && subtype != "*") {
            return None;
        }
        let (mut group, mut version, mut as_kind, mut quality) = (None, None, None, 1.0);
        for param in parts {
            let param = param.trim();
            if param.is_empty() {
                continue;
            }
            let (name, value) = param.split_once('=')?;
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value)
                .to_owned();
            match name.as_str() {
                "q" => quality = parse_quality(&value)?,
                "g" => group = Some(value),
                "v" => version = Some(value),
                "as" => as_kind = Some(value),
                _ => {} // e.g. charset, pretty: no bearing on the format
            }
        }
        let target = (group.is_some() || version.is_some() || as_kind.is_some())
            .then_some((group, version, as_kind));
        Some(MediaRange {
            kind,
            subtype,
            target,
            quality,
        })
    }

    /// Its `g`, `v` and `as` parameters.
    fn target(&self) -> (Option<&str>, Option<&str>, Option<&str>) {
        match &self.target {
            Some((g, v, kind)) => (g.as_deref(), v.as_deref(), kind.as_deref()),
            None => (None, None, None),
        }
    }
}

/// A qvalue: `0` to `1` with at most three decimals.
fn parse_quality(text: &str) -> Option<f32> {
    let valid = match text.split_once('.') {
        Some((int, frac)) => {
            matches!(int, "0" | "1") && frac.len() <= 3 && frac.bytes().all(|b| b.is_ascii_digit())
        }
        None => matches!(text, "0" | "1"),
    };
    let quality: f32 = text.parse().ok()?;
    (valid && quality <= 1.0).then_some(quality)
}

/// The well-formed media ranges of an `Accept` header, in order (malformed ones left out).
pub(crate) fn media_ranges(accept: &str) -> impl Iterator<Item = MediaRange> + '_ {
    accept.split(',').filter_map(MediaRange::parse)
}

/// What a read's answer carries, as the client asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The objects.
    Object,
    /// Table rows (`as=Table`).
    Table,
    /// The objects' metadata alone, as `PartialObjectMetadata` of this `meta.k8s.io`
    /// version (`as=PartialObjectMetadata`).
    Metadata(&'static str),
}

/// The shape an `Accept` header asks for: a Table if any range asks for one, else the
/// metadata alone if a range asks for that (`v1beta1` if it names it, else `v1`), else the
/// objects.
pub(crate) fn shape(accept: Option<&str>) -> Shape {
    // Both other shapes need `g=meta.k8s.io`: most requests are answered without parsing.
    let Some(accept) = accept.filter(|a| a.contains("meta.k8s.io")) else {
        return Shape::Object;
    };
    let mut metadata = None;
    for range in media_ranges(accept) {
        let (group, version, kind) = range.target();
        if group != Some("meta.k8s.io") {
            continue;
        }
        match kind {
            Some("Table") => return Shape::Table,
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") if metadata.is_none() => {
                metadata = Some(match version {
                    Some("v1beta1") => "meta.k8s.io/v1beta1",
                    _ => "meta.k8s.io/v1",
                });
            }
            _ => {}
        }
    }
    metadata.map_or(Shape::Object, Shape::Metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_headers_ask_for_tables_or_metadata() {
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(shape(Some(table)), Shape::Table);
        assert_eq!(shape(Some("application/json")), Shape::Object);
        assert_eq!(shape(None), Shape::Object);
        assert_eq!(
            shape(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            )),
            Shape::Metadata("meta.k8s.io/v1")
        );
        assert_eq!(
            shape(Some(
                "application/json;as=PartialObjectMetadata;v=v1beta1;g=meta.k8s.io"
            )),
            Shape::Metadata("meta.k8s.io/v1beta1")
        );
        assert_eq!(
            shape(Some(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json;as=Table;g=meta.k8s.io;v=v1"
            )),
            Shape::Table,
            "a Table wins wherever it is listed"
        );
        assert_eq!(
            shape(Some("application/json;as=Table;v=v1")),
            Shape::Object,
            "without g=meta.k8s.io"
        );
    }
}
