//! Container image references, `[registry[:port]/]repository[:tag][@digest]`, read the
//! way Docker reads them: the first path component is the registry only if it holds a
//! `.` or a `:` or is `localhost`.

use std::fmt;

/// An image reference taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ImageRef {
    /// `registry.example.com:5000`; none for Docker Hub's default.
    pub registry: Option<String>,
    /// `team/web`.
    pub repository: String,
    /// `1.2.3`.
    pub tag: Option<String>,
    /// `sha256:…`.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Takes `image` apart; the error says what is wrong with it.
    pub(super) fn parse(image: &str) -> Result<Self, String> {
        let (name, digest) = match image.split_once('@') {
            Some((name, digest)) => (name, Some(digest)),
            None => (image, None),
        };
        let (registry, path) = match name.split_once('/') {
            Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
                (Some(first), rest)
            }
            _ => (None, name),
        };
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repository, tag)) => (repository, Some(tag)),
            None => (path, None),
        };
        if let Some(registry) = registry
            && registry.starts_with(':')
        {
            return Err(format!("registry {registry:?} has no host"));
        }
        if repository.is_empty() || repository.split('/').any(str::is_empty) {
            return Err(format!(
                "repository {repository:?} has an empty path component"
            ));
        }
        if let Some(tag) = tag
            && (tag.is_empty() || tag.contains('/'))
        {
            return Err(format!("{tag:?} is not a tag"));
        }
        if let Some(digest) = digest
            && !digest
                .split_once(':')
                .is_some_and(|(algorithm, hex)| !algorithm.is_empty() && !hex.is_empty())
        {
            return Err(format!("{digest:?} is not a digest (algorithm:hex)"));
        }
        Ok(Self {
            registry: registry.map(str::to_owned),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest: digest.map(str::to_owned),
        })
    }

    /// This reference with the parts given replaced; a new tag drops the digest.
    pub(super) fn overridden(
        mut self,
        registry: Option<&str>,
        repository: Option<&str>,
        tag: Option<&str>,
    ) -> Self {
        if let Some(registry) = registry {
            self.registry = Some(registry.to_owned());
        }
        if let Some(repository) = repository {
            self.repository = repository.to_owned();
        }
        if let Some(tag) = tag {
            self.tag = Some(tag.to_owned());
            self.digest = None;
        }
        self
    }
}

/// `image` with the parts given replaced (a new tag drops the digest), or why it cannot
/// be: `image` is no reference, or the result would read back as another one.
pub(super) fn replace_parts(
    image: &str,
    registry: Option<&str>,
    repository: Option<&str>,
    tag: Option<&str>,
) -> Result<String, String> {
    let changed = ImageRef::parse(image)
        .map_err(|why| format!("image {image:?} is not an image reference: {why}"))?
        .overridden(registry, repository, tag);
    let text = changed.to_string();
    match ImageRef::parse(&text) {
        Ok(back) if back == changed => Ok(text),
        Ok(back) => {
            let part =
                |part: Option<String>| part.map_or("none".to_owned(), |part| format!("{part:?}"));
            Err(format!(
                "the override makes {text:?}, which reads back as registry {}, repository {:?}, tag {}",
                part(back.registry),
                back.repository,
                part(back.tag),
            ))
        }
        Err(why) => Err(format!(
            "the override makes {text:?}, which is not an image reference: {why}"
        )),
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(registry) = &self.registry {
            write!(f, "{registry}/")?;
        }
        f.write_str(&self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}
