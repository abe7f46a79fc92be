//! The client's address: the peer, or the X-Forwarded-For entry just before the first
//! trusted proxy (nginx's `real_ip_recursive`), for the access lists, the header rules and
//! the limits' keys alike.

use ipnet::IpNet;
use pingora::http::RequestHeader;
use std::net::IpAddr;

/// Folds IPv4-mapped IPv6 (`::ffff:a.b.c.d`) to IPv4.
pub fn fold(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Whether `ip` (IPv4-mapped folded) is one of the trusted proxies.
pub fn trusted(ip: IpAddr, proxies: &[IpNet]) -> bool {
    let ip = fold(ip);
    proxies.iter().any(|n| n.contains(&ip))
}

/// Parses one X-Forwarded-For element: an address, possibly with a port or in brackets.
fn parse_xff_item(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Some(sa.ip());
    }
    s.strip_prefix('[')
        .and_then(|r| r.split(']').next())
        .and_then(|v| v.parse().ok())
}

/// The client address: the peer, or, when the peer is a trusted proxy, the right-most
/// X-Forwarded-For entry that is not itself a trusted proxy. An entry that does not parse ends
/// the walk at the last address known good (a forged or broken hop is not believed).
pub fn client_ip(peer: IpAddr, req: &RequestHeader, proxies: &[IpNet]) -> IpAddr {
    let mut client = fold(peer);
    if proxies.is_empty() || !trusted(client, proxies) {
        return client;
    }
    // Several X-Forwarded-For headers form one list, in order: walk them all from the right.
    for v in req.headers.get_all("x-forwarded-for").iter().rev() {
        let Ok(s) = std::str::from_utf8(v.as_bytes()) else {
            return client;
        };
        for item in s.rsplit(',') {
            if item.trim().is_empty() {
                continue;
            }
            match parse_xff_item(item) {
                Some(ip) => {
                    client = fold(ip);
                    if !trusted(client, proxies) {
                        return client;
                    }
                }
                None => return client,
            }
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(xff: &[&str]) -> RequestHeader {
        let mut r = RequestHeader::build("GET", b"/x?a=%41b&k=v", None).expect("request");
        for v in xff {
            r.append_header("x-forwarded-for", *v).expect("header");
        }
        r
    }

    fn nets(v: &[&str]) -> Vec<IpNet> {
        v.iter().map(|s| s.parse().expect("cidr")).collect()
    }

    #[test]
    fn untrusted_peers_are_taken_as_they_are() {
        let ip = client_ip(
            "198.51.100.7".parse().expect("ip"),
            &req(&["1.2.3.4"]),
            &nets(&["10.0.0.0/8"]),
        );
        assert_eq!(ip, "198.51.100.7".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_entry_wins() {
        let proxies = nets(&["10.0.0.0/8", "127.0.0.0/8"]);
        let peer = "127.0.0.1".parse().expect("ip");
        let r = req(&["6.6.6.6, 203.0.113.9", "10.1.2.3"]);
        assert_eq!(
            client_ip(peer, &r, &proxies),
            "203.0.113.9".parse::<IpAddr>().expect("ip")
        );
        // All trusted: the left-most.
        let r = req(&["10.0.0.1, 10.0.0.2"]);
        assert_eq!(
            client_ip(peer, &r, &proxies),
            "10.0.0.1".parse::<IpAddr>().expect("ip")
        );
        // A broken entry stops the walk at the last good hop.
        let r = req(&["203.0.113.9, garbage"]);
        assert_eq!(client_ip(peer, &r, &proxies), peer);
        // Ports and brackets are tolerated.
        let r = req(&["[2001:db8::1]:443"]);
        assert_eq!(
            client_ip(peer, &r, &proxies),
            "2001:db8::1".parse::<IpAddr>().expect("ip")
        );
    }
}
