//! Listener isolation (the Gateway API's): on a port with listeners of several hostnames, a
//! request is the listener's whose hostname matches its host most specifically (an exact
//! name, then the longest `*.` wildcard, which covers names of any depth, then the listener
//! without hostname), and meets only the routes of that listener (`listener_host`).

use std::collections::HashMap;
use tollgate_config::model::RouteConfig;

/// The listeners' hostnames of each port, as routes name them.
#[derive(Debug, Default)]
pub struct Listeners {
    by_port: HashMap<u16, Vec<String>>,
}

impl Listeners {
    /// `None` when no route names a listener.
    pub fn new<'a>(routes: impl Iterator<Item = &'a RouteConfig>) -> Option<Self> {
        let mut l = Listeners::default();
        for r in routes {
            let (Some(h), Some(ports)) = (&r.listener_host, &r.ports) else {
                continue;
            };
            for p in ports {
                let hs = l.by_port.entry(*p).or_default();
                if !hs.contains(h) {
                    hs.push(h.clone());
                }
            }
        }
        (!l.by_port.is_empty()).then_some(l)
    }

    /// The hostname of the listener a request for `host` on `port` is given to; `None`
    /// when the port has none that matches (then no `listener_host` route takes it).
    pub fn of(&self, port: u16, host: Option<&str>) -> Option<&str> {
        let hs = self.by_port.get(&port)?;
        let mut best: Option<(&str, (u8, usize))> = None;
        for h in hs {
            let rank = match (h.strip_prefix("*."), host) {
                (None, _) if h.is_empty() => (0, 0),
                (None, Some(host)) if h == host => (2, h.len()),
                (Some(parent), Some(host))
                    if host.len() > parent.len() + 1
                        && host.ends_with(parent)
                        && host.as_bytes()[host.len() - parent.len() - 1] == b'.' =>
                {
                    (1, parent.len())
                }
                _ => continue,
            };
            if best.is_none_or(|(_, b)| rank > b) {
                best = Some((h, rank));
            }
        }
        best.map(|(h, _)| h)
    }
}

#[cfg(test)]
mod tests {
    use super::Listeners;

    #[test]
    fn the_most_specific_listener_takes_the_host() {
        let mut l = Listeners::default();
        l.by_port.insert(
            80,
            [
                "",
                "*.example.com",
                "*.foo.example.com",
                "abc.foo.example.com",
            ]
            .map(String::from)
            .to_vec(),
        );
        assert_eq!(
            l.of(80, Some("abc.foo.example.com")),
            Some("abc.foo.example.com")
        );
        assert_eq!(
            l.of(80, Some("bar.foo.example.com")),
            Some("*.foo.example.com")
        );
        assert_eq!(
            l.of(80, Some("x.y.foo.example.com")),
            Some("*.foo.example.com")
        );
        assert_eq!(l.of(80, Some("bar.example.com")), Some("*.example.com"));
        assert_eq!(l.of(80, Some("example.com")), Some(""));
        assert_eq!(l.of(80, Some("other.org")), Some(""));
        assert_eq!(l.of(80, None), Some(""));
        assert_eq!(l.of(81, Some("bar.example.com")), None);
        l.by_port.insert(81, vec!["*.example.com".into()]);
        assert_eq!(l.of(81, Some("other.org")), None);
    }
}
