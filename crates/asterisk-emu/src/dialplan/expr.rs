//! `$[...]` expressions as Asterisk's `ast_expr` (main/ast_expr2.y) evaluates them, after
//! variable substitution: `|`, `&`, comparisons, `+ - * / %`, unary `-` and `!`, parentheses.
//!
//! What matters for a dialplan's behaviour is kept exact: a quoted string keeps its quotes (so
//! `"1" = 1` is false), two numbers compare as numbers and anything else as strings, `|` and
//! `&` return an operand rather than 1, and an expression that does not parse (the classic
//! `$[ = 0]` of an empty variable) is a syntax error whose value is empty, which GotoIf and
//! ExecIf take as false. `=~`, `:` and the `?::` conditional are not implemented: they are a
//! syntax error here.

/// Longest expression read, as Asterisk's own buffer (`VAR_BUF_SIZE`).
pub const MAX_EXPRESSION_BYTES: usize = 4096;
/// Deepest nesting of parentheses and unary operators read (the parser recurses on them).
pub const MAX_NESTING: usize = 64;

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Number(f64),
    Text(String),
}

impl Value {
    fn from_token(t: &str) -> Value {
        match t.parse::<f64>() {
            Ok(n) if n.is_finite() => Value::Number(n),
            _ => Value::Text(t.to_string()),
        }
    }

    fn number(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            Value::Text(t) => t.parse::<f64>().ok().filter(|n| n.is_finite()),
        }
    }

    /// Zero or empty: false.
    fn is_false(&self) -> bool {
        match self {
            Value::Number(n) => *n == 0.0,
            Value::Text(t) => t.is_empty() || self.number() == Some(0.0),
        }
    }

    fn text(&self) -> String {
        match self {
            Value::Number(n) if n.fract() == 0.0 && n.abs() < 1e18 => format!("{}", *n as i64),
            Value::Number(n) => format!("{n}"),
            Value::Text(t) => t.clone(),
        }
    }
}

fn bool_value(b: bool) -> Value {
    Value::Number(if b { 1.0 } else { 0.0 })
}

/// The operators, longest first so that `!=` is not read as `!`.
const OPERATORS: [&str; 17] = [
    "!=", "<=", ">=", "==", "=~", "::", "|", "&", "=", "<", ">", "+", "-", "*", "/", "%", "!",
];

fn tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Ok(out);
        }
        if let Some(body) = rest.strip_prefix('"') {
            let end = body
                .find('"')
                .ok_or_else(|| format!("unterminated quote in {text:?}"))?;
            out.push(rest[..end + 2].to_string());
            rest = &body[end + 1..];
            continue;
        }
        if let Some(c) = rest.chars().next().filter(|c| "()".contains(*c)) {
            out.push(c.to_string());
            rest = &rest[1..];
            continue;
        }
        if let Some(op) = OPERATORS.iter().find(|op| rest.starts_with(**op)) {
            out.push((*op).to_string());
            rest = &rest[op.len()..];
            continue;
        }
        let end = rest
            .find(|c: char| {
                c.is_whitespace()
                    || "()\"".contains(c)
                    || OPERATORS.iter().any(|op| op.starts_with(c))
            })
            .unwrap_or(rest.len());
        if end == 0 {
            // The first character of an operator this reader does not know (`:` alone,
            // Asterisk's regex match): nothing would consume it.
            let c = rest.chars().next().unwrap_or_default();
            return Err(format!("syntax error: operator {c:?} is not emulated"));
        }
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
}

struct Parser {
    tokens: Vec<String>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn next(&mut self) -> Option<String> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn unexpected(&self) -> String {
        match self.peek() {
            Some(t) => format!("syntax error: unexpected '{t}'"),
            None => "syntax error: unexpected end".into(),
        }
    }

    /// One level of left-associative binary operators, above `next_level`.
    fn binary(
        &mut self,
        ops: &[&str],
        next_level: fn(&mut Parser) -> Result<Value, String>,
        apply: fn(&str, Value, Value) -> Value,
    ) -> Result<Value, String> {
        let mut left = next_level(self)?;
        while let Some(op) = self.peek().filter(|t| ops.contains(t)).map(str::to_string) {
            self.at += 1;
            let right = next_level(self)?;
            left = apply(&op, left, right);
        }
        Ok(left)
    }

    fn or(&mut self) -> Result<Value, String> {
        self.binary(
            &["|"],
            Parser::and,
            |_, a, b| if a.is_false() { b } else { a },
        )
    }

    fn and(&mut self) -> Result<Value, String> {
        self.binary(&["&"], Parser::comparison, |_, a, b| {
            if a.is_false() || b.is_false() {
                Value::Number(0.0)
            } else {
                a
            }
        })
    }

    fn comparison(&mut self) -> Result<Value, String> {
        self.binary(
            &["=", "==", "!=", "<", ">", "<=", ">="],
            Parser::sum,
            compare,
        )
    }

    fn sum(&mut self) -> Result<Value, String> {
        self.binary(&["+", "-"], Parser::product, arithmetic)
    }

    fn product(&mut self) -> Result<Value, String> {
        self.binary(&["*", "/", "%"], Parser::unary, arithmetic)
    }

    fn unary(&mut self) -> Result<Value, String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("nested deeper than {MAX_NESTING}"));
        }
        let v = self.unary_inner();
        self.depth -= 1;
        v
    }

    fn unary_inner(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some("-") => {
                self.at += 1;
                let v = self.unary()?;
                Ok(match v.number() {
                    Some(n) => Value::Number(-n),
                    None => Value::Text(String::new()),
                })
            }
            Some("!") => {
                self.at += 1;
                Ok(bool_value(self.unary()?.is_false()))
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<Value, String> {
        match self.next() {
            Some(t) if t == "(" => {
                let v = self.or()?;
                match self.next().as_deref() {
                    Some(")") => Ok(v),
                    _ => Err("syntax error: missing ')'".into()),
                }
            }
            Some(t) if t == ")" || OPERATORS.contains(&t.as_str()) => {
                self.at -= 1;
                Err(self.unexpected())
            }
            Some(t) => Ok(Value::from_token(&t)),
            None => Err(self.unexpected()),
        }
    }
}

fn compare(op: &str, a: Value, b: Value) -> Value {
    // A quoted string never reads as a number: its quotes are part of it.
    let ordering = match (a.number(), b.number()) {
        (Some(x), Some(y)) => x.partial_cmp(&y),
        _ => Some(a.text().cmp(&b.text())),
    };
    let Some(o) = ordering else {
        return bool_value(false);
    };
    bool_value(match op {
        "=" | "==" => o.is_eq(),
        "!=" => o.is_ne(),
        "<" => o.is_lt(),
        ">" => o.is_gt(),
        "<=" => o.is_le(),
        _ => o.is_ge(),
    })
}

fn arithmetic(op: &str, a: Value, b: Value) -> Value {
    let (Some(x), Some(y)) = (a.number(), b.number()) else {
        // Asterisk logs "non-numeric argument" and gives an empty value.
        return Value::Text(String::new());
    };
    Value::Number(match op {
        "+" => x + y,
        "-" => x - y,
        "*" => x * y,
        "/" if y == 0.0 => return Value::Text(String::new()),
        "/" => (x / y).trunc(),
        "%" if y == 0.0 => return Value::Text(String::new()),
        _ => x % y,
    })
}

/// The value of `expression` (the text between `$[` and `]`, already substituted), or the
/// error Asterisk would log; its value is then empty.
pub fn evaluate(expression: &str) -> Result<String, String> {
    if expression.len() > MAX_EXPRESSION_BYTES {
        return Err(format!(
            "expression of {} bytes, longer than {MAX_EXPRESSION_BYTES}",
            expression.len()
        ));
    }
    let mut p = Parser {
        tokens: tokens(expression)?,
        at: 0,
        depth: 0,
    };
    let v = p.or()?;
    if p.peek().is_some() {
        return Err(p.unexpected());
    }
    Ok(v.text())
}

/// Asterisk's `pbx_checkcondition`: empty is false, a number is its value, other text true.
pub fn is_true(condition: &str) -> bool {
    let c = condition.trim();
    if c.is_empty() {
        return false;
    }
    match c.parse::<f64>() {
        Ok(n) => n != 0.0,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_keep_quotes_and_compare_numbers_as_numbers() {
        assert_eq!(evaluate("\"FAILURE\" = \"FAILURE\"").unwrap(), "1");
        assert_eq!(evaluate("\"\" != \"\"").unwrap(), "0");
        assert_eq!(evaluate("\"1\" = 1").unwrap(), "0");
        assert_eq!(evaluate("2 = 02").unwrap(), "1");
        assert_eq!(evaluate("10 > 9").unwrap(), "1");
        assert_eq!(evaluate("abc < abd").unwrap(), "1");
    }

    #[test]
    fn or_and_return_an_operand_and_precedence_holds() {
        assert_eq!(evaluate("0 | abc").unwrap(), "abc");
        assert_eq!(evaluate("x & 0").unwrap(), "0");
        assert_eq!(evaluate("1 + 2 * 3").unwrap(), "7");
        assert_eq!(evaluate("(1 + 2) * 3").unwrap(), "9");
        assert_eq!(evaluate("7 / 2").unwrap(), "3");
        assert_eq!(evaluate("-3 + 1").unwrap(), "-2");
        assert_eq!(evaluate("!0").unwrap(), "1");
        assert_eq!(
            evaluate("\"a\" = \"b\" | 2 > 1 & \"x\" != \"\"").unwrap(),
            "1"
        );
    }

    #[test]
    fn an_empty_operand_is_a_syntax_error_that_reads_false() {
        // `$[${TANDEM_CONTACT_COUNT} = 0]` with the variable unset.
        assert!(evaluate(" = 0").is_err());
        assert!(evaluate("1 +").is_err());
        assert!(evaluate("(1").is_err());
        assert!(evaluate(&"(".repeat(2000)).is_err());
        // `:` alone (Asterisk's regex match) is not emulated: an error, not a loop.
        assert!(evaluate(":\n").is_err());
        assert!(evaluate("abc : a").is_err());
        assert!(evaluate(&format!("{}1", "!".repeat(2000))).is_err());
        assert!(!is_true(""));
        assert!(is_true("abc") && is_true("2") && !is_true("0"));
    }
}
