//! A small, lossless XML tree for editing libvirt domain XML.
//!
//! Why not an off-the-shelf DOM: the domain XML we edit belongs to the operator, and release must
//! give back exactly what was there. This tree keeps every text node (indentation included), every
//! comment, CDATA section, processing instruction, attribute order and namespace prefix as written,
//! so parse → serialise reproduces libvirt's output byte for byte (tested). Names are kept as raw
//! qualified names (`vgpud:pinning`), namespace declarations as ordinary attributes, which is how a
//! foreign namespace in `<metadata>` survives untouched without this module understanding it.
//!
//! Values are stored in their escaped source form and unescaped when read; values set through
//! [`Element::set_attr`] and [`Element::push_text`] are escaped here, so nothing the agent or a
//! client supplies can break the document structure. Parsing uses `quick-xml`'s event reader.

use std::fmt::Write as _;

use quick_xml::escape::{escape, unescape};
use quick_xml::events::Event;

use crate::VmpinError;

/// One child of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A nested element.
    Element(Element),
    /// Character data in escaped source form (entity references kept as written).
    Text(String),
    /// `<![CDATA[...]]>` content, verbatim.
    CData(String),
    /// `<!--...-->` content, verbatim.
    Comment(String),
    /// `<?...?>` content, verbatim.
    ProcessingInstruction(String),
}

/// An element: raw qualified name, attributes in source order, children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    name: String,
    /// (qualified name, escaped value, quote character)
    attrs: Vec<(String, String, char)>,
    children: Vec<Node>,
    /// Written `<a/>` in the source (or built empty here): written that way again whenever it
    /// has no children, and collapsed back to it when removals leave only indentation.
    self_closing: bool,
}

/// A parsed document: what comes before the root (declaration, comments), the root, what follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    prolog: String,
    /// The root element.
    pub root: Element,
    epilog: String,
}

impl Document {
    /// Parses a whole document. Errors name the byte offset where the reader gave up.
    pub fn parse(text: &str) -> Result<Self, VmpinError> {
        parse_document(text)
    }

    /// The document as text; parse followed by this returns the input unchanged.
    pub fn to_xml(&self) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str(&self.prolog);
        self.root.write_to(&mut out);
        out.push_str(&self.epilog);
        out
    }
}

impl Element {
    /// A new empty element (written `<name/>` until it gets children).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            attrs: Vec::new(),
            children: Vec::new(),
            self_closing: true,
        }
    }

    /// Builder form of [`Element::set_attr`].
    pub fn with_attr(mut self, name: &str, value: &str) -> Self {
        self.set_attr(name, value);
        self
    }

    /// Builder form of [`Element::push`].
    pub fn with_child(mut self, child: Element) -> Self {
        self.push(child);
        self
    }

    /// Builder form of [`Element::push_text`].
    pub fn with_text(mut self, text: &str) -> Self {
        self.push_text(text);
        self
    }

    /// The raw qualified name as written (`hostdev`, `vgpud:allocation`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace prefix of the name, if any.
    pub fn prefix(&self) -> Option<&str> {
        self.name.split_once(':').map(|(p, _)| p)
    }

    /// The name without its prefix.
    pub fn local_name(&self) -> &str {
        self.name.split_once(':').map_or(&self.name, |(_, l)| l)
    }

    /// An attribute's unescaped value. A value with a malformed entity reads as its raw form.
    pub fn attr(&self, name: &str) -> Option<String> {
        self.attrs
            .iter()
            .find(|(k, _, _)| k == name)
            .map(|(_, v, _)| unescape(v).map_or_else(|_| v.clone(), |s| s.into_owned()))
    }

    /// Sets (or replaces in place) an attribute; the value is escaped.
    pub fn set_attr(&mut self, name: &str, value: &str) {
        let escaped = escape(value).into_owned();
        match self.attrs.iter_mut().find(|(k, _, _)| k == name) {
            Some(slot) => slot.1 = escaped,
            None => self.attrs.push((name.to_owned(), escaped, '\'')),
        }
    }

    /// Attribute names in source order.
    pub fn attr_names(&self) -> impl Iterator<Item = &str> {
        self.attrs.iter().map(|(k, _, _)| k.as_str())
    }

    /// All children, text included.
    pub fn nodes(&self) -> &[Node] {
        &self.children
    }

    /// Child elements in order.
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            _ => None,
        })
    }

    /// The first child element with this raw name.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.elements().find(|e| e.name == name)
    }

    /// Mutable access to the first child element with this raw name.
    pub fn child_mut(&mut self, name: &str) -> Option<&mut Element> {
        self.children.iter_mut().find_map(|n| match n {
            Node::Element(e) if e.name == name => Some(e),
            _ => None,
        })
    }

    /// The first child element satisfying `pred`, mutably.
    pub fn find_mut(&mut self, pred: impl Fn(&Element) -> bool) -> Option<&mut Element> {
        self.children.iter_mut().find_map(|n| match n {
            Node::Element(e) if pred(e) => Some(e),
            _ => None,
        })
    }

    /// Whether any child element exists.
    pub fn has_elements(&self) -> bool {
        self.elements().next().is_some()
    }

    /// The concatenated unescaped text of this element's direct text children, trimmed.
    pub fn text(&self) -> String {
        let mut raw = String::new();
        for n in &self.children {
            match n {
                Node::Text(t) => {
                    raw.push_str(&unescape(t).map_or_else(|_| t.clone(), |s| s.into()))
                }
                Node::CData(t) => raw.push_str(t),
                _ => {}
            }
        }
        raw.trim().to_owned()
    }

    /// Appends a child element as is (no indentation).
    pub fn push(&mut self, child: Element) {
        self.children.push(Node::Element(child));
    }

    /// Appends text; the text is escaped.
    pub fn push_text(&mut self, text: &str) {
        self.children.push(Node::Text(escape(text).into_owned()));
    }

    /// Appends `child` as the last element, indented the way libvirt indents (two spaces per
    /// level) when this element sits at `depth` (root = 0). Keeps the closing tag's indentation.
    pub fn append_indented(&mut self, mut child: Element, depth: usize) {
        child.indent(depth + 1);
        let inner = format!("\n{}", "  ".repeat(depth + 1));
        let closing = format!("\n{}", "  ".repeat(depth));
        let at = match self.children.last() {
            Some(Node::Text(t)) if is_blank(t) => self.children.len() - 1,
            _ => {
                self.children.push(Node::Text(closing));
                self.children.len() - 1
            }
        };
        self.children.insert(at, Node::Element(child));
        self.children.insert(at, Node::Text(inner));
    }

    /// The first child element named `name`, inserted empty at element position `index` (with
    /// indentation for `depth`) when there is none.
    pub fn child_or_insert(&mut self, name: &str, index: usize, depth: usize) -> &mut Element {
        if self.child(name).is_none() {
            self.insert_indented(index, Element::new(name), depth);
        }
        let at = self
            .children
            .iter()
            .position(|n| matches!(n, Node::Element(e) if e.name == name));
        match at.map(|i| &mut self.children[i]) {
            Some(Node::Element(e)) => e,
            // The element was inserted just above.
            _ => unreachable!("child {name} was just inserted"),
        }
    }

    /// Inserts `child` at element position `index` (counting elements only) with indentation for
    /// `depth`; past the end it appends.
    pub fn insert_indented(&mut self, index: usize, mut child: Element, depth: usize) {
        let Some(at) = self.node_index_of_element(index) else {
            self.append_indented(child, depth);
            return;
        };
        child.indent(depth + 1);
        let inner = format!("\n{}", "  ".repeat(depth + 1));
        // Keep the whitespace that preceded the element now at `at` in front of the new one.
        self.children.insert(at, Node::Text(inner));
        self.children.insert(at, Node::Element(child));
    }

    /// Removes every child element matching `pred`, with the blank text just before each, and
    /// returns them in order along with the element position of the first one removed.
    pub fn remove_where(
        &mut self,
        pred: impl Fn(&Element) -> bool,
    ) -> (Vec<Element>, Option<usize>) {
        let mut removed = Vec::new();
        let mut first = None;
        let mut element_pos = 0usize;
        let mut i = 0;
        while i < self.children.len() {
            let hit = matches!(&self.children[i], Node::Element(e) if pred(e));
            if !hit {
                if matches!(self.children[i], Node::Element(_)) {
                    element_pos += 1;
                }
                i += 1;
                continue;
            }
            first.get_or_insert(element_pos);
            if let Node::Element(e) = self.children.remove(i) {
                removed.push(e);
            }
            if i > 0 && matches!(&self.children[i - 1], Node::Text(t) if is_blank(t)) {
                self.children.remove(i - 1);
                i -= 1;
            }
        }
        if self.self_closing
            && self
                .children
                .iter()
                .all(|n| matches!(n, Node::Text(t) if is_blank(t)))
        {
            // An element that was `<a/>` before children were added goes back to that form.
            self.children.clear();
        }
        (removed, first)
    }

    fn node_index_of_element(&self, index: usize) -> Option<usize> {
        self.children
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n, Node::Element(_)))
            .nth(index)
            .map(|(i, _)| i)
    }

    /// Re-indents an element built in memory (element-only content) for `depth`. Elements with
    /// text content are left alone, so mixed content is never altered.
    pub fn indent(&mut self, depth: usize) {
        if self
            .children
            .iter()
            .any(|n| matches!(n, Node::Text(t) if !is_blank(t)))
            || !self.has_elements()
        {
            return;
        }
        let mut rebuilt = Vec::with_capacity(self.children.len() * 2 + 1);
        for n in std::mem::take(&mut self.children) {
            match n {
                Node::Text(_) => {}
                Node::Element(mut e) => {
                    e.indent(depth + 1);
                    rebuilt.push(Node::Text(format!("\n{}", "  ".repeat(depth + 1))));
                    rebuilt.push(Node::Element(e));
                }
                other => {
                    rebuilt.push(Node::Text(format!("\n{}", "  ".repeat(depth + 1))));
                    rebuilt.push(other);
                }
            }
        }
        rebuilt.push(Node::Text(format!("\n{}", "  ".repeat(depth))));
        self.children = rebuilt;
    }

    /// This element (and its subtree) as XML text.
    pub fn to_xml(&self) -> String {
        let mut out = String::new();
        self.write_to(&mut out);
        out
    }

    fn write_to(&self, out: &mut String) {
        out.push('<');
        out.push_str(&self.name);
        for (k, v, q) in &self.attrs {
            let _ = write!(out, " {k}={q}{v}{q}");
        }
        if self.children.is_empty() && self.self_closing {
            out.push_str("/>");
            return;
        }
        out.push('>');
        for n in &self.children {
            match n {
                Node::Element(e) => e.write_to(out),
                Node::Text(t) => out.push_str(t),
                Node::CData(t) => {
                    let _ = write!(out, "<![CDATA[{t}]]>");
                }
                Node::Comment(t) => {
                    let _ = write!(out, "<!--{t}-->");
                }
                Node::ProcessingInstruction(t) => {
                    let _ = write!(out, "<?{t}?>");
                }
            }
        }
        let _ = write!(out, "</{}>", self.name);
    }

    /// The namespace URI bound to `prefix` by a declaration on this element.
    pub fn declared_namespace(&self, prefix: &str) -> Option<String> {
        self.attr(&format!("xmlns:{prefix}"))
    }
}

fn is_blank(text: &str) -> bool {
    text.chars().all(char::is_whitespace)
}

fn parse_error(offset: u64, reason: impl std::fmt::Display) -> VmpinError {
    VmpinError::Xml(format!("at byte {offset}: {reason}"))
}

fn element_from(
    start: &quick_xml::events::BytesStart<'_>,
    offset: u64,
) -> Result<Element, VmpinError> {
    let name = start.name().as_ref().to_owned();
    let mut attrs = Vec::new();
    let raw = start.attributes_raw();
    let mut cursor = 0;
    for attr in start.attributes() {
        let attr = attr.map_err(|e| parse_error(offset, e))?;
        let key = attr.key.as_ref().to_owned();
        let value = attr.value.into_owned();
        // The reader does not say which quote a value used; find it in the raw tag so the
        // attribute is written back the same way.
        let quote = raw
            .get(cursor..)
            .and_then(|rest| rest.find(key.as_str()).map(|at| cursor + at + key.len()))
            .and_then(|after_key| {
                let rest = raw.get(after_key..)?;
                let eq = rest.find('=')?;
                let q = rest[eq + 1..].trim_start().chars().next()?;
                let value_start =
                    after_key + eq + 1 + (rest[eq + 1..].len() - rest[eq + 1..].trim_start().len());
                cursor = value_start + value.len() + 2;
                Some(q)
            })
            .filter(|q| *q == '"' || *q == '\'')
            .unwrap_or('\'');
        attrs.push((key, value, quote));
    }
    Ok(Element {
        name,
        attrs,
        children: Vec::new(),
        self_closing: false,
    })
}

fn parse_document(text: &str) -> Result<Document, VmpinError> {
    let mut reader = quick_xml::Reader::from_str(text);
    reader.config_mut().trim_text(false);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element> = Vec::new();
    let mut prolog = String::new();
    let mut epilog = String::new();
    let mut root: Option<Element> = None;
    loop {
        let offset = reader.buffer_position();
        let event = reader.read_event().map_err(|e| parse_error(offset, e))?;
        // Text outside the root element is kept verbatim in the prolog or epilog.
        let outside = stack.is_empty();
        let raw_outside = |out: &mut String, s: String| out.push_str(&s);
        match event {
            Event::Start(s) => stack.push(element_from(&s, offset)?),
            Event::Empty(s) => {
                let mut e = element_from(&s, offset)?;
                e.self_closing = true;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::Element(e)),
                    None if root.is_none() => root = Some(e),
                    None => return Err(parse_error(offset, "more than one root element")),
                }
            }
            Event::End(_) => {
                let Some(done) = stack.pop() else {
                    return Err(parse_error(offset, "closing tag without an opening tag"));
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::Element(done)),
                    None if root.is_none() => root = Some(done),
                    None => return Err(parse_error(offset, "more than one root element")),
                }
            }
            Event::Text(t) => {
                let raw = t.into_inner().into_owned();
                push_text(
                    &mut stack,
                    outside,
                    root.is_some(),
                    &mut prolog,
                    &mut epilog,
                    raw,
                );
            }
            Event::GeneralRef(r) => {
                let raw = format!("&{};", r.into_inner());
                push_text(
                    &mut stack,
                    outside,
                    root.is_some(),
                    &mut prolog,
                    &mut epilog,
                    raw,
                );
            }
            Event::CData(c) => {
                let raw = c.into_inner().into_owned();
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::CData(raw)),
                    None => return Err(parse_error(offset, "CDATA outside the root element")),
                }
            }
            Event::Comment(c) => {
                let raw = c.into_inner().into_owned();
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::Comment(raw)),
                    None if root.is_none() => raw_outside(&mut prolog, format!("<!--{raw}-->")),
                    None => raw_outside(&mut epilog, format!("<!--{raw}-->")),
                }
            }
            Event::PI(p) => {
                let raw = p.into_inner().into_owned();
                match stack.last_mut() {
                    Some(parent) => parent.children.push(Node::ProcessingInstruction(raw)),
                    None if root.is_none() => raw_outside(&mut prolog, format!("<?{raw}?>")),
                    None => raw_outside(&mut epilog, format!("<?{raw}?>")),
                }
            }
            Event::Decl(d) => {
                let raw: &str = &d;
                prolog.push_str(&format!("<?{raw}?>"));
            }
            Event::DocType(d) => {
                let raw = d.into_inner().into_owned();
                prolog.push_str(&format!("<!DOCTYPE {raw}>"));
            }
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(parse_error(
            reader.buffer_position(),
            "document ends inside an element",
        ));
    }
    let root = root.ok_or_else(|| parse_error(0, "no root element"))?;
    Ok(Document {
        prolog,
        root,
        epilog,
    })
}

fn push_text(
    stack: &mut [Element],
    outside: bool,
    after_root: bool,
    prolog: &mut String,
    epilog: &mut String,
    raw: String,
) {
    if outside {
        if after_root {
            epilog.push_str(&raw);
        } else {
            prolog.push_str(&raw);
        }
        return;
    }
    if let Some(parent) = stack.last_mut() {
        // quick-xml splits text at entity references; keep one node so text() and writing see it whole.
        if let Some(Node::Text(prev)) = parent.children.last_mut() {
            prev.push_str(&raw);
        } else {
            parent.children.push(Node::Text(raw));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBVIRT_STYLE: &str = "<domain type='test'>\n  <name>a &amp; b</name>\n  <metadata>\n    <other:thing xmlns:other=\"https://example.org/o\">\n      <other:x a=\"1\">text &amp; more &#x41;</other:x>\n    </other:thing>\n  </metadata>\n  <!-- operator note -->\n  <devices>\n  </devices>\n  <description><![CDATA[<raw>]]></description>\n  <empty></empty>\n</domain>\n";

    #[test]
    fn round_trips_byte_for_byte() {
        let doc = Document::parse(LIBVIRT_STYLE).unwrap();
        assert_eq!(doc.to_xml(), LIBVIRT_STYLE);
        let with_decl = "<?xml version=\"1.0\"?>\n<!-- c -->\n<a x=\"it's\"><b/></a>\n";
        assert_eq!(Document::parse(with_decl).unwrap().to_xml(), with_decl);
    }

    #[test]
    fn reads_unescaped_values_and_prefixes() {
        let doc = Document::parse(LIBVIRT_STYLE).unwrap();
        assert_eq!(doc.root.child("name").unwrap().text(), "a & b");
        let meta = doc.root.child("metadata").unwrap();
        let thing = meta.elements().next().unwrap();
        assert_eq!(thing.prefix(), Some("other"));
        assert_eq!(thing.local_name(), "thing");
        assert_eq!(
            thing.declared_namespace("other").as_deref(),
            Some("https://example.org/o")
        );
        assert_eq!(thing.child("other:x").unwrap().text(), "text & more A");
    }

    #[test]
    fn escapes_what_it_writes() {
        let e = Element::new("x")
            .with_attr("v", "a'b<c>&\"")
            .with_text("1 < 2 & ]]>");
        let xml = e.to_xml();
        let back = Document::parse(&xml).unwrap().root;
        assert_eq!(back.attr("v").unwrap(), "a'b<c>&\"");
        assert_eq!(back.text(), "1 < 2 & ]]>");
    }

    #[test]
    fn indented_insert_then_remove_restores_the_text() {
        let src = "<a>\n  <b/>\n  <c/>\n</a>";
        let mut doc = Document::parse(src).unwrap();
        doc.root
            .append_indented(Element::new("d").with_child(Element::new("e")), 0);
        assert_eq!(
            doc.to_xml(),
            "<a>\n  <b/>\n  <c/>\n  <d>\n    <e/>\n  </d>\n</a>"
        );
        doc.root.insert_indented(1, Element::new("z"), 0);
        assert_eq!(
            doc.to_xml(),
            "<a>\n  <b/>\n  <z/>\n  <c/>\n  <d>\n    <e/>\n  </d>\n</a>"
        );
        let (gone, first) = doc
            .root
            .remove_where(|e| e.name() == "d" || e.name() == "z");
        assert_eq!(gone.len(), 2);
        assert_eq!(first, Some(1));
        assert_eq!(doc.to_xml(), src);
    }

    #[test]
    fn append_into_an_empty_element() {
        let mut doc = Document::parse("<a>\n  <b/>\n</a>").unwrap();
        let b = doc.root.child_mut("b").unwrap();
        b.append_indented(Element::new("c"), 1);
        assert_eq!(doc.to_xml(), "<a>\n  <b>\n    <c/>\n  </b>\n</a>");
        doc.root.child_mut("b").unwrap().remove_where(|_| true);
        assert_eq!(doc.to_xml(), "<a>\n  <b/>\n</a>");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            "",
            "<a>",
            "<a></b>",
            "<a/><b/>",
            "text",
            "<a x='1' x='2'/>",
            "<a>&bogus</a>",
        ] {
            let r = Document::parse(bad);
            if let Ok(doc) = &r {
                // quick-xml may accept some oddities; they must still round-trip.
                assert_eq!(doc.to_xml(), bad, "{bad:?}");
            }
        }
        assert!(Document::parse("").is_err());
        assert!(Document::parse("<a>").is_err());
        assert!(Document::parse("<a></b>").is_err());
        assert!(Document::parse("<a/><b/>").is_err());
    }
}
