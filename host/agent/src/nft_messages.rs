//! The nf_tables netlink messages of the agent's SNAT table, as bytes:
//! one batch (one kernel transaction) that replaces the whole table, or one
//! that deletes it. Pure: `snat::SnatRules` in, a batch out.
//!
//! Replacing is "create the table if absent, delete it, create it again
//! with its chain and rules" in one batch, as `nft -f` does with `add
//! table; delete table; table { ... }`: the kernel applies all of it or
//! none, so the table is never seen half-made, and however many times the
//! agent (re)starts there is one table with one set of rules.
//!
//! Layout (linux/netlink.h, linux/netfilter/nfnetlink.h,
//! linux/netfilter/nf_tables.h): each message is a netlink header, a
//! `nfgenmsg` (family, version, resource id in network order) and
//! attributes (length and type in host order, padded to 4 bytes); nf_tables
//! numbers are big-endian.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use crate::snat::SnatRules;

/// The agent's table (family ip) and its chain.
pub const TABLE: &str = "ipam-agent";
pub const CHAIN: &str = "snat";

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;

const AF_UNSPEC: u8 = 0;
const NFPROTO_IPV4: u8 = 2;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFTA_BITWISE_SREG: u16 = 1;
const NFTA_BITWISE_DREG: u16 = 2;
const NFTA_BITWISE_LEN: u16 = 3;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_BITWISE_XOR: u16 = 5;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

/// NF_INET_POST_ROUTING.
const HOOK_POSTROUTING: u32 = 4;
/// NF_IP_PRI_NAT_SRC, nft's `srcnat`.
const PRIORITY_SRCNAT: i32 = 100;
const NF_ACCEPT: u32 = 1;
const NFT_RETURN: i32 = -5;
const NFT_REG_VERDICT: u32 = 0;
const NFT_REG_1: u32 = 1;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_CMP_EQ: u32 = 0;
/// Offsets of the source and destination addresses in an IPv4 header.
const IPV4_SADDR: u32 = 12;
const IPV4_DADDR: u32 = 16;

/// What each message of a batch is, by sequence number, to name the one
/// the kernel refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub bytes: Vec<u8>,
    /// (sequence number, what) of every message asking for an ack.
    pub acked: Vec<(u32, String)>,
}

/// Attributes being written (a nest's start is kept by the call that
/// opens it).
struct Attributes {
    bytes: Vec<u8>,
}

impl Attributes {
    fn new() -> Self {
        Self { bytes: Vec::new() }
    }

    fn pad(&mut self) {
        while self.bytes.len() % 4 != 0 {
            self.bytes.push(0);
        }
    }

    fn put(&mut self, kind: u16, value: &[u8]) {
        let length = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.bytes.extend_from_slice(&length.to_ne_bytes());
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self.bytes.extend_from_slice(value);
        self.pad();
    }

    fn string(&mut self, kind: u16, value: &str) {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.put(kind, &bytes);
    }

    fn be32(&mut self, kind: u16, value: u32) {
        self.put(kind, &value.to_be_bytes());
    }

    /// A nested attribute whose content `fill` writes.
    fn nest(&mut self, kind: u16, fill: impl FnOnce(&mut Attributes)) {
        let mut inner = Attributes::new();
        fill(&mut inner);
        self.put(kind | NLA_F_NESTED, &inner.bytes);
    }
}

struct BatchWriter {
    batch: Batch,
    seq: u32,
}

impl BatchWriter {
    fn new(first_seq: u32) -> Self {
        let mut writer = Self {
            batch: Batch {
                bytes: Vec::new(),
                acked: Vec::new(),
            },
            seq: first_seq,
        };
        writer.message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, AF_UNSPEC, None, |_| {});
        writer
    }

    /// One message; `what` names it when it asks for an ack.
    fn message(
        &mut self,
        kind: u16,
        flags: u16,
        family: u8,
        what: Option<String>,
        fill: impl FnOnce(&mut Attributes),
    ) {
        let mut attributes = Attributes::new();
        fill(&mut attributes);
        // The batch markers name the subsystem in the resource id.
        let resource = if kind == NFNL_MSG_BATCH_BEGIN || kind == NFNL_MSG_BATCH_END {
            NFNL_SUBSYS_NFTABLES
        } else {
            0
        };
        let length = 16 + 4 + attributes.bytes.len();
        let bytes = &mut self.batch.bytes;
        bytes.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_ne_bytes());
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&flags.to_ne_bytes());
        bytes.extend_from_slice(&self.seq.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&[family, 0]);
        bytes.extend_from_slice(&resource.to_be_bytes());
        bytes.extend_from_slice(&attributes.bytes);
        if let Some(what) = what {
            self.batch.acked.push((self.seq, what));
        }
        self.seq = self.seq.wrapping_add(1);
    }

    fn nft(&mut self, message: u16, flags: u16, what: String, fill: impl FnOnce(&mut Attributes)) {
        self.message(
            (NFNL_SUBSYS_NFTABLES << 8) | message,
            NLM_F_REQUEST | NLM_F_ACK | flags,
            NFPROTO_IPV4,
            Some(what),
            fill,
        );
    }

    /// Ends the batch.
    fn finish(mut self) -> Batch {
        self.message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, AF_UNSPEC, None, |_| {});
        self.batch
    }

    /// The table made if absent.
    fn new_table(&mut self) {
        self.nft(
            NFT_MSG_NEWTABLE,
            NLM_F_CREATE,
            format!("creating table ip {TABLE}"),
            |a| a.string(NFTA_TABLE_NAME, TABLE),
        );
    }

    /// The table made if absent, then deleted: what follows starts from
    /// nothing, whether the table was there or not.
    fn drop_table(&mut self) {
        self.new_table();
        self.nft(
            NFT_MSG_DELTABLE,
            0,
            format!("deleting table ip {TABLE}"),
            |a| a.string(NFTA_TABLE_NAME, TABLE),
        );
    }

    fn rule(&mut self, what: String, expressions: impl FnOnce(&mut Attributes)) {
        self.nft(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, what, |a| {
            a.string(NFTA_RULE_TABLE, TABLE);
            a.string(NFTA_RULE_CHAIN, CHAIN);
            a.nest(NFTA_RULE_EXPRESSIONS, expressions);
        });
    }
}

fn expression(list: &mut Attributes, name: &str, data: impl FnOnce(&mut Attributes)) {
    list.nest(NFTA_LIST_ELEM, |element| {
        element.string(NFTA_EXPR_NAME, name);
        element.nest(NFTA_EXPR_DATA, data);
    });
}

fn data_value(attributes: &mut Attributes, kind: u16, value: &[u8]) {
    attributes.nest(kind, |a| a.put(NFTA_DATA_VALUE, value));
}

/// `ip saddr|daddr <range>`: the address loaded into register 1, masked
/// to the prefix, compared with the network. A /0 range matches anything
/// and needs no expression.
fn matches_range(list: &mut Attributes, offset: u32, range: &Ipv4Net) {
    if range.prefix_len() == 0 {
        return;
    }
    expression(list, "payload", |a| {
        a.be32(NFTA_PAYLOAD_DREG, NFT_REG_1);
        a.be32(NFTA_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
        a.be32(NFTA_PAYLOAD_OFFSET, offset);
        a.be32(NFTA_PAYLOAD_LEN, 4);
    });
    if range.prefix_len() < 32 {
        expression(list, "bitwise", |a| {
            a.be32(NFTA_BITWISE_SREG, NFT_REG_1);
            a.be32(NFTA_BITWISE_DREG, NFT_REG_1);
            a.be32(NFTA_BITWISE_LEN, 4);
            data_value(a, NFTA_BITWISE_MASK, &range.netmask().octets());
            data_value(a, NFTA_BITWISE_XOR, &Ipv4Addr::UNSPECIFIED.octets());
        });
    }
    expression(list, "cmp", |a| {
        a.be32(NFTA_CMP_SREG, NFT_REG_1);
        a.be32(NFTA_CMP_OP, NFT_CMP_EQ);
        data_value(a, NFTA_CMP_DATA, &range.network().octets());
    });
}

/// The batch that replaces the agent's table with `rules`' (sequence
/// numbers from `first_seq`).
pub fn replace_table(rules: &SnatRules, first_seq: u32) -> Batch {
    let mut batch = BatchWriter::new(first_seq);
    batch.drop_table();
    batch.new_table();
    batch.nft(
        NFT_MSG_NEWCHAIN,
        NLM_F_CREATE,
        format!("creating chain {CHAIN} (nat, postrouting, srcnat)"),
        |a| {
            a.string(NFTA_CHAIN_TABLE, TABLE);
            a.string(NFTA_CHAIN_NAME, CHAIN);
            a.nest(NFTA_CHAIN_HOOK, |hook| {
                hook.be32(NFTA_HOOK_HOOKNUM, HOOK_POSTROUTING);
                hook.be32(NFTA_HOOK_PRIORITY, PRIORITY_SRCNAT as u32);
            });
            a.be32(NFTA_CHAIN_POLICY, NF_ACCEPT);
            a.string(NFTA_CHAIN_TYPE, "nat");
        },
    );
    for range in &rules.kept {
        batch.rule(format!("ip daddr {range} return"), |list| {
            matches_range(list, IPV4_DADDR, range);
            expression(list, "immediate", |a| {
                a.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
                a.nest(NFTA_IMMEDIATE_DATA, |data| {
                    data.nest(NFTA_DATA_VERDICT, |verdict| {
                        verdict.be32(NFTA_VERDICT_CODE, NFT_RETURN as u32);
                    });
                });
            });
        });
    }
    for range in &rules.sources {
        batch.rule(format!("ip saddr {range} masquerade"), |list| {
            matches_range(list, IPV4_SADDR, range);
            expression(list, "masq", |_| {});
        });
    }
    batch.finish()
}

/// The batch that deletes the agent's table, whether it is there or not.
pub fn delete_table(first_seq: u32) -> Batch {
    let mut batch = BatchWriter::new(first_seq);
    batch.drop_table();
    batch.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages of a batch: (type, flags, seq, family, attribute bytes).
    fn messages(bytes: &[u8]) -> Vec<(u16, u16, u32, u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let length = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
            assert!(
                length >= 20 && length <= rest.len() && length % 4 == 0,
                "{length}"
            );
            out.push((
                u16::from_ne_bytes(rest[4..6].try_into().unwrap()),
                u16::from_ne_bytes(rest[6..8].try_into().unwrap()),
                u32::from_ne_bytes(rest[8..12].try_into().unwrap()),
                rest[16],
                rest[20..length].to_vec(),
            ));
            rest = &rest[length..];
        }
        out
    }

    /// Top-level attributes: (type without the nested flag, value).
    fn attributes(mut bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let length = u16::from_ne_bytes(bytes[0..2].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes(bytes[2..4].try_into().unwrap()) & !NLA_F_NESTED;
            out.push((kind, bytes[4..length].to_vec()));
            bytes = &bytes[length.div_ceil(4) * 4..];
        }
        out
    }

    #[test]
    fn a_replace_is_one_batch_dropping_then_making_the_table() {
        let rules = SnatRules {
            sources: vec!["10.0.0.0/16".parse().unwrap()],
            kept: vec![
                "10.0.0.0/16".parse().unwrap(),
                "192.0.2.7/32".parse().unwrap(),
            ],
        };
        let batch = replace_table(&rules, 100);
        let messages = messages(&batch.bytes);
        let kinds: Vec<u16> = messages.iter().map(|m| m.0).collect();
        let nft = |m: u16| (NFNL_SUBSYS_NFTABLES << 8) | m;
        assert_eq!(
            kinds,
            [
                NFNL_MSG_BATCH_BEGIN,
                nft(NFT_MSG_NEWTABLE),
                nft(NFT_MSG_DELTABLE),
                nft(NFT_MSG_NEWTABLE),
                nft(NFT_MSG_NEWCHAIN),
                nft(NFT_MSG_NEWRULE),
                nft(NFT_MSG_NEWRULE),
                nft(NFT_MSG_NEWRULE),
                NFNL_MSG_BATCH_END,
            ]
        );
        let seqs: Vec<u32> = messages.iter().map(|m| m.2).collect();
        assert_eq!(seqs, (100..109).collect::<Vec<_>>());
        assert_eq!(
            batch.acked.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
            (101..108).collect::<Vec<_>>(),
            "every message but the batch markers is acked"
        );
        assert_eq!(batch.acked[4].1, "ip daddr 10.0.0.0/16 return");
        assert_eq!(batch.acked[6].1, "ip saddr 10.0.0.0/16 masquerade");
        // The table's name, NUL-terminated, in every table message.
        assert_eq!(
            attributes(&messages[1].4),
            [(NFTA_TABLE_NAME, b"ipam-agent\0".to_vec())]
        );
        assert!(messages[1..8].iter().all(|m| m.3 == NFPROTO_IPV4));
        // A /32 is compared whole: payload and cmp, then the verdict.
        let rule = attributes(&messages[6].4);
        let expressions = attributes(&rule[2].1);
        let names: Vec<String> = expressions
            .iter()
            .map(|(_, element)| {
                let name = &attributes(element)[0].1;
                String::from_utf8(name[..name.len() - 1].to_vec()).unwrap()
            })
            .collect();
        assert_eq!(names, ["payload", "cmp", "immediate"]);
        let rule = attributes(&messages[7].4);
        let names: Vec<usize> = attributes(&rule[2].1).iter().map(|e| e.1.len()).collect();
        assert_eq!(names.len(), 4, "payload, bitwise, cmp, masq");
    }

    #[test]
    fn a_delete_drops_the_table_whether_there_or_not() {
        let batch = delete_table(7);
        let kinds: Vec<u16> = messages(&batch.bytes).iter().map(|m| m.0).collect();
        assert_eq!(
            kinds,
            [
                NFNL_MSG_BATCH_BEGIN,
                (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE,
                (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE,
                NFNL_MSG_BATCH_END
            ]
        );
    }
}
