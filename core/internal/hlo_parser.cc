// The HLO text parser: a lexer, a syntax pass that builds a small AST per computation, and a
// build pass that turns the ENTRY computation into a Graph. The syntax is specified in
// docs/hlo.md; the printer is in core/hlo_text.cc.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tessel/core/collective_device_list.h"
#include "tessel/core/graph.h"
#include "tessel/core/hlo_text.h"
#include "tessel/core/internal/sdy_sharding.h"
#include "tessel/core/literal.h"
#include "tessel/core/shape.h"
#include "tessel/core/shape_inference.h"
#include "tessel/core/status_macros.h"
#include "tessel/core/verifier.h"
#include "tessel/core/window.h"

namespace tessel {
namespace {

// Debian's abseil has its own absl::string_view (not std::string_view): convert at the edges.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }
template <typename T>
bool ToInt(std::string_view s, T* value) {
  return absl::SimpleAtoi(Av(s), value);
}
absl::string_view Piece(std::string_view s) { return Av(s); }
template <typename T>
const T& Piece(const T& value) {
  return value;
}
// absl::StrCat that also takes std::string_view.
template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(Piece(args)...);
}
std::string_view Strip(std::string_view s) { return Sv(absl::StripAsciiWhitespace(Av(s))); }

// Tuple shapes nested deeper than this are rejected (keeps the recursive shape parser bounded).
constexpr int kMaxShapeDepth = 32;
// Shapes with more elements than this are rejected (keeps element and byte counts of shapes and
// small tuples of them free of int64 overflow).
constexpr int64_t kMaxElements = int64_t{1} << 56;
// Device ids in replica groups must be below this (bounds the memory of checks indexed by id).
constexpr int64_t kMaxDevices = int64_t{1} << 24;

// ---------------------------------------------------------------------------------------------
// Lexer.

enum class TokenKind : uint8_t { kWord, kString, kPunct, kEnd };

// 24 bytes: a text of punctuation is one token per byte, so the token array is the parser's
// largest allocation (it was 40 bytes a token, 80 with the vector's growth, before Lex sized it).
struct Token {
  std::string_view text;  // a view into the input; where it starts gives the byte offset
  int line = 1;
  TokenKind kind = TokenKind::kEnd;
};

bool IsWordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
         c == '%' || c == '$';
}

// Quoted for an error message: at most 60 bytes, and a control or non-ASCII byte as \xNN, so a
// NUL or a stray byte of a binary file neither cuts the message short on a terminal nor hides.
std::string Quote(std::string_view text) {
  constexpr size_t kMaxQuoted = 60;
  const bool cut = text.size() > kMaxQuoted;
  if (cut) text = text.substr(0, kMaxQuoted);
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return Cat(out, cut ? "...\"" : "\"");
}

std::string Quote(const Token& token) {
  return token.kind == TokenKind::kEnd ? std::string("end of input") : Quote(token.text);
}

absl::Status LineError(absl::StatusCode code, int line, std::string_view why) {
  return absl::Status(code, Cat("line ", line, ": ", std::string(why)));
}

absl::Status SyntaxError(int line, std::string_view why) {
  return LineError(absl::StatusCode::kInvalidArgument, line, why);
}

// Calls emit(token) for each token of `text`, then for the end token.
template <typename Emit>
absl::Status LexInto(std::string_view text, Emit emit) {
  int line = 1;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      ++i;
      continue;
    }
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      int start_line = line;
      size_t close = text.find("*/", i + 2);
      if (close == std::string_view::npos) {
        return SyntaxError(start_line, "unterminated comment \"/*\"");
      }
      line += static_cast<int>(std::count(text.begin() + i, text.begin() + close, '\n'));
      i = close + 2;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    Token token;
    token.line = line;
    size_t end = i + 1;
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') {
        if (text[j] == '\\') ++j;
        if (j < text.size() && text[j] == '\n') ++line;
        ++j;
      }
      if (j >= text.size()) return SyntaxError(token.line, "unterminated string \"\"\"");
      token.kind = TokenKind::kString;
      end = j + 1;
    } else if (c == '-' && i + 1 < text.size() && text[i + 1] == '>') {
      token.kind = TokenKind::kPunct;
      end = i + 2;
    } else if (IsWordChar(c)) {
      size_t j = i;
      while (j < text.size() && IsWordChar(text[j]) &&
             !(text[j] == '-' && j + 1 < text.size() && text[j + 1] == '>')) {
        ++j;
      }
      token.kind = TokenKind::kWord;
      end = j;
    } else {
      token.kind = TokenKind::kPunct;
    }
    token.text = text.substr(i, end - i);
    emit(token);
    i = end;
  }
  Token end;
  end.kind = TokenKind::kEnd;
  end.line = line;
  end.text = text.substr(text.size());
  emit(end);
  return absl::OkStatus();
}

// The tokens of `text`, ending with a kEnd token. Lexes twice, counting first, so the array is
// allocated once at its final size.
absl::StatusOr<std::vector<Token>> Lex(std::string_view text) {
  size_t count = 0;
  TESSEL_RETURN_IF_ERROR(LexInto(text, [&](const Token&) { ++count; }));
  std::vector<Token> tokens;
  tokens.reserve(count);
  TESSEL_RETURN_IF_ERROR(LexInto(text, [&](const Token& token) { tokens.push_back(token); }));
  return tokens;
}

std::string_view StripPercent(std::string_view name) {
  if (!name.empty() && name.front() == '%') name.remove_prefix(1);
  return name;
}

// ---------------------------------------------------------------------------------------------
// Syntax tree.

// Token indices [begin, end) of an attribute's value.
struct AttrAst {
  const Token* name = nullptr;
  size_t begin = 0;
  size_t end = 0;
};

struct OperandAst {
  std::optional<Shape> shape;  // when written before the name
  const Token* name = nullptr;
};

struct InstrAst {
  bool is_root = false;
  const Token* name = nullptr;
  Shape shape;
  const Token* opcode_token = nullptr;
  Opcode opcode = Opcode::kParameter;
  // `call`: not an Opcode of the graph; the parser inlines the to_apply computation instead.
  bool is_call = false;
  // `custom-call`: not an Opcode either; the sharding annotations among them become copies.
  bool is_custom_call = false;
  std::vector<OperandAst> operands;
  // constant and parameter: the text between the parentheses.
  std::string_view raw_operands;
  std::vector<AttrAst> attrs;
};

struct CompAst {
  bool is_entry = false;
  const Token* name = nullptr;
  std::vector<InstrAst> instrs;
};

// What a recognised to_apply computation computes.
struct Reduction {
  ReduceKind kind = ReduceKind::kAdd;
  DType dtype = DType::kF32;
  // The root is parameter(1): the computation returns its second argument (scatter-overwrite).
  // Only scatter accepts it.
  bool overwrite = false;
};

// ---------------------------------------------------------------------------------------------
// Parser.

class Parser {
 public:
  Parser(std::string_view text, std::vector<Token> tokens)
      : text_(text), tokens_(std::move(tokens)) {}

  absl::StatusOr<std::unique_ptr<Graph>> Parse() {
    TESSEL_RETURN_IF_ERROR(ParseModule());
    return BuildEntry();
  }

 private:
  // --- token access ---
  const Token& Peek(size_t k = 0) const { return tokens_[std::min(pos_ + k, tokens_.size() - 1)]; }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  static bool IsPunct(const Token& t, std::string_view p) {
    return t.kind == TokenKind::kPunct && t.text == p;
  }
  static bool IsWord(const Token& t, std::string_view w) {
    return t.kind == TokenKind::kWord && t.text == w;
  }
  bool ConsumePunct(std::string_view p) {
    if (!IsPunct(Peek(), p)) return false;
    Next();
    return true;
  }
  absl::Status ExpectPunct(std::string_view p, std::string_view context) {
    if (ConsumePunct(p)) return absl::OkStatus();
    return SyntaxError(Peek().line, Cat("expected \"", p, "\" ", context, ", got ", Quote(Peek())));
  }
  // The input from the start of `first` to the end of `last`.
  static std::string_view Raw(const Token& first, const Token& last) {
    const char* begin = first.text.data();
    return std::string_view(begin,
                            static_cast<size_t>(last.text.data() + last.text.size() - begin));
  }

  // Skips a balanced group starting at an opening bracket at `pos_`; leaves `pos_` after its
  // closing bracket.
  absl::Status SkipBalanced() {
    std::vector<const Token*> open;
    do {
      const Token& t = Next();
      if (t.kind == TokenKind::kEnd) {
        return SyntaxError(open.back()->line,
                           Cat("unbalanced ", Quote(*open.back()), ": never closed"));
      }
      if (t.kind != TokenKind::kPunct) continue;
      if (t.text == "(" || t.text == "{" || t.text == "[") {
        open.push_back(&t);
      } else if (t.text == ")" || t.text == "}" || t.text == "]") {
        if (open.empty()) return SyntaxError(t.line, Cat("unbalanced ", Quote(t)));
        char expected = open.back()->text == "(" ? ')' : open.back()->text == "{" ? '}' : ']';
        if (t.text[0] != expected) {
          return SyntaxError(t.line, Cat("unbalanced ", Quote(t), ": it closes ",
                                         Quote(*open.back()), " of line ", open.back()->line));
        }
        open.pop_back();
      }
    } while (!open.empty());
    return absl::OkStatus();
  }

  // --- module and computations ---
  absl::Status ParseModule() {
    if (Peek().kind == TokenKind::kEnd) {
      return SyntaxError(Peek().line, "empty input: expected \"HloModule\"");
    }
    if (!IsWord(Peek(), "HloModule")) {
      return SyntaxError(Peek().line, Cat("expected \"HloModule\", got ", Quote(Peek())));
    }
    Next();
    if (Peek().kind != TokenKind::kWord) {
      return SyntaxError(Peek().line,
                         Cat("expected a module name after \"HloModule\", got ", Quote(Peek())));
    }
    module_name_ = std::string(StripPercent(Next().text));
    // Header attributes (entry_computation_layout=..., is_scheduled=...): ignored, except the
    // Shardy meshes in frontend_attributes, which a shard_map's custom-calls refer to.
    while (ConsumePunct(",")) {
      AttrAst attr;
      TESSEL_RETURN_IF_ERROR(ParseAttribute(&attr));
      if (attr.name->text == "frontend_attributes") {
        module_frontend_attributes_ = AttrValueText(attr);
        module_frontend_attributes_line_ = attr.name->line;
      }
    }
    while (Peek().kind != TokenKind::kEnd) {
      CompAst comp;
      TESSEL_RETURN_IF_ERROR(ParseComputation(&comp));
      comps_.push_back(std::move(comp));
    }
    return absl::OkStatus();
  }

  absl::Status ParseComputation(CompAst* comp) {
    if (IsWord(Peek(), "ENTRY")) {
      comp->is_entry = true;
      Next();
    }
    if (Peek().kind != TokenKind::kWord || StripPercent(Peek().text).empty()) {
      return SyntaxError(Peek().line, Cat("expected a computation name, got ", Quote(Peek())));
    }
    comp->name = &Next();
    // Signature: "(p: f32[], ...) -> f32[]", optional; the instructions are authoritative.
    if (IsPunct(Peek(), "(")) TESSEL_RETURN_IF_ERROR(SkipBalanced());
    if (ConsumePunct("->")) {
      TESSEL_ASSIGN_OR_RETURN(Shape unused, ParseShapeTokens(/*in_signature=*/true, 0));
      (void)unused;
    }
    const Token& open = Peek();
    TESSEL_RETURN_IF_ERROR(
        ExpectPunct("{", Cat("to open computation %", StripPercent(comp->name->text))));
    const Token* root = nullptr;
    while (!ConsumePunct("}")) {
      if (Peek().kind == TokenKind::kEnd) {
        return SyntaxError(open.line, Cat("unbalanced \"{\": computation %",
                                          StripPercent(comp->name->text), " is never closed"));
      }
      InstrAst instr;
      TESSEL_RETURN_IF_ERROR(ParseInstruction(&instr));
      if (instr.is_root) {
        if (root != nullptr) {
          return SyntaxError(
              instr.name->line,
              Cat("second ROOT ", Quote(instr.name->text), " in computation %",
                  StripPercent(comp->name->text), " (the first is on line ", root->line, ")"));
        }
        root = instr.name;
      }
      comp->instrs.push_back(std::move(instr));
    }
    if (comp->instrs.empty()) {
      return SyntaxError(comp->name->line, Cat("computation %", StripPercent(comp->name->text),
                                               " has no instructions"));
    }
    return absl::OkStatus();
  }

  // shape := dtype "[" dims "]" layout? | "(" shape, ... ")"
  absl::StatusOr<Shape> ParseShapeTokens(bool in_signature, int depth) {
    const Token& first = Peek();
    if (depth > kMaxShapeDepth) {
      return SyntaxError(
          first.line, Cat("tuple shape nested deeper than ", kMaxShapeDepth, " at ", Quote(first)));
    }
    if (ConsumePunct("(")) {
      std::vector<Shape> elements;
      if (!ConsumePunct(")")) {
        while (true) {
          TESSEL_ASSIGN_OR_RETURN(Shape e, ParseShapeTokens(in_signature, depth + 1));
          elements.push_back(std::move(e));
          if (ConsumePunct(")")) break;
          TESSEL_RETURN_IF_ERROR(ExpectPunct(",", "or \")\" in a tuple shape"));
        }
      }
      return Shape::Tuple(std::move(elements));
    }
    if (first.kind != TokenKind::kWord) {
      return SyntaxError(first.line, Cat("expected a shape, got ", Quote(first)));
    }
    absl::StatusOr<DType> dtype = ParseDType(first.text);
    if (!dtype.ok()) {
      return SyntaxError(first.line,
                         Cat("expected a shape, got ", Quote(first), " (not an element type)"));
    }
    Next();
    TESSEL_RETURN_IF_ERROR(ExpectPunct("[", Cat("after element type ", Quote(first))));
    std::vector<int64_t> dims;
    int64_t elements = 1;
    if (!ConsumePunct("]")) {
      while (true) {
        const Token& t = Next();
        int64_t d = 0;
        if (t.kind != TokenKind::kWord || !ToInt(t.text, &d) || d < 0) {
          return SyntaxError(t.line, Cat("expected a non-negative dimension size in the "
                                         "shape, got ",
                                         Quote(t)));
        }
        if (d > 0 && elements > kMaxElements / d) {
          return SyntaxError(t.line, Cat("shape too large: dimension ", Quote(t),
                                         " makes more than 2^56 elements"));
        }
        if (d > 0) elements *= d;
        dims.push_back(d);
        if (ConsumePunct("]")) break;
        TESSEL_RETURN_IF_ERROR(ExpectPunct(",", "or \"]\" in the shape dims"));
      }
    }
    // Layout, e.g. {1,0} or {1,0:T(8,128)}: ignored. In a signature "{" may open the body.
    if (IsPunct(Peek(), "{")) {
      const Token& after = Peek(1);
      bool is_layout = !in_signature ||
                       (after.kind == TokenKind::kWord && absl::ascii_isdigit(after.text[0])) ||
                       (IsPunct(after, "}") && IsPunct(Peek(2), "{"));
      if (is_layout) TESSEL_RETURN_IF_ERROR(SkipBalanced());
    }
    return Shape(*dtype, std::move(dims));
  }

  // attr := name "=" value; value := balanced group | word | string | nothing.
  absl::Status ParseAttribute(AttrAst* attr) {
    if (Peek().kind != TokenKind::kWord) {
      return SyntaxError(Peek().line, Cat("expected an attribute name, got ", Quote(Peek())));
    }
    attr->name = &Next();
    const Token& eq = Peek();
    TESSEL_RETURN_IF_ERROR(ExpectPunct("=", Cat("after attribute name ", Quote(*attr->name))));
    attr->begin = pos_;
    const Token& v = Peek();
    if (IsPunct(v, "[")) {
      // Also XLA's iota replica groups: [2,4]<=[8] or [2,4]<=[4,2]T(1,0).
      TESSEL_RETURN_IF_ERROR(SkipBalanced());
      if (IsPunct(Peek(), "<") && IsPunct(Peek(1), "=") && IsPunct(Peek(2), "[")) {
        Next();
        Next();
        TESSEL_RETURN_IF_ERROR(SkipBalanced());
        if (IsWord(Peek(), "T") && IsPunct(Peek(1), "(")) {
          Next();
          TESSEL_RETURN_IF_ERROR(SkipBalanced());
        }
      }
    } else if (IsPunct(v, "{") || IsPunct(v, "(")) {
      TESSEL_RETURN_IF_ERROR(SkipBalanced());
    } else if ((v.kind == TokenKind::kWord || v.kind == TokenKind::kString) && v.line == eq.line) {
      Next();
      // convolution's dim_labels=b01f_01io->b01f: one value of three tokens.
      if (IsPunct(Peek(), "->") && Peek(1).kind == TokenKind::kWord && Peek(1).line == eq.line) {
        Next();
        Next();
      }
    }
    attr->end = pos_;
    return absl::OkStatus();
  }

  absl::Status ParseInstruction(InstrAst* instr) {
    if (IsWord(Peek(), "ROOT")) {
      instr->is_root = true;
      Next();
    }
    const Token& name = Peek();
    if (name.kind != TokenKind::kWord || StripPercent(name.text).empty()) {
      return SyntaxError(name.line, Cat("expected an instruction name, got ", Quote(name)));
    }
    instr->name = &Next();
    TESSEL_RETURN_IF_ERROR(ExpectPunct("=", Cat("after instruction name ", Quote(name))));
    TESSEL_ASSIGN_OR_RETURN(instr->shape, ParseShapeTokens(/*in_signature=*/false, 0));
    const Token& op = Peek();
    if (op.kind != TokenKind::kWord) {
      return SyntaxError(op.line, Cat("expected an op name after the shape of ", Quote(name),
                                      ", got ", Quote(op)));
    }
    if (op.text == "call") {
      instr->is_call = true;
    } else if (op.text == "custom-call") {
      instr->is_custom_call = true;
    } else {
      absl::StatusOr<Opcode> opcode = ParseOpcode(op.text);
      if (!opcode.ok()) {
        return LineError(absl::StatusCode::kUnimplemented, op.line,
                         Cat("unsupported op ", Quote(op)));
      }
      instr->opcode = *opcode;
    }
    instr->opcode_token = &Next();
    const Token& open = Peek();
    if (!IsPunct(open, "(")) {
      return SyntaxError(open.line, Cat("expected \"(\" after ", Quote(op), ", got ", Quote(open)));
    }
    if (!instr->is_call && !instr->is_custom_call &&
        (instr->opcode == Opcode::kConstant || instr->opcode == Opcode::kParameter)) {
      TESSEL_RETURN_IF_ERROR(SkipBalanced());
      const Token& close = tokens_[pos_ - 1];
      const char* inside = open.text.data() + open.text.size();
      instr->raw_operands =
          std::string_view(inside, static_cast<size_t>(close.text.data() - inside));
    } else {
      Next();
      TESSEL_RETURN_IF_ERROR(ParseOperands(instr));
    }
    while (ConsumePunct(",")) {
      AttrAst attr;
      TESSEL_RETURN_IF_ERROR(ParseAttribute(&attr));
      instr->attrs.push_back(attr);
    }
    const Token& after = Peek();
    if (after.kind != TokenKind::kWord && after.kind != TokenKind::kEnd && !IsPunct(after, "}")) {
      return SyntaxError(after.line,
                         Cat("unexpected ", Quote(after), " after instruction ", Quote(name)));
    }
    return absl::OkStatus();
  }

  absl::Status ParseOperands(InstrAst* instr) {
    if (ConsumePunct(")")) return absl::OkStatus();
    while (true) {
      OperandAst operand;
      const Token& t = Peek();
      if (IsPunct(t, "(") || (t.kind == TokenKind::kWord && IsPunct(Peek(1), "["))) {
        TESSEL_ASSIGN_OR_RETURN(operand.shape, ParseShapeTokens(/*in_signature=*/false, 0));
      }
      const Token& name = Peek();
      if (name.kind != TokenKind::kWord || StripPercent(name.text).empty()) {
        return SyntaxError(name.line, Cat("expected an operand name, got ", Quote(name)));
      }
      operand.name = &Next();
      instr->operands.push_back(std::move(operand));
      if (ConsumePunct(")")) return absl::OkStatus();
      TESSEL_RETURN_IF_ERROR(ExpectPunct(",", "or \")\" in the operand list"));
    }
  }

  // --- attribute values ---
  std::string_view AttrValueText(const AttrAst& attr) const {
    if (attr.begin == attr.end) return "";
    return Raw(tokens_[attr.begin], tokens_[attr.end - 1]);
  }
  absl::Status MalformedAttr(const AttrAst& attr, std::string_view why) const {
    return SyntaxError(attr.name->line, Cat("malformed attribute ", attr.name->text, "=",
                                            Quote(AttrValueText(attr)), ": ", std::string(why)));
  }

  absl::StatusOr<int64_t> ParseIntToken(const AttrAst& attr, const Token& t) const {
    int64_t value = 0;
    if (t.kind != TokenKind::kWord || !ToInt(t.text, &value)) {
      return MalformedAttr(attr, Cat("expected an integer, got ", Quote(t)));
    }
    return value;
  }

  absl::StatusOr<int64_t> AttrInt(const AttrAst& attr) const {
    if (attr.end - attr.begin != 1) return MalformedAttr(attr, "expected one integer");
    return ParseIntToken(attr, tokens_[attr.begin]);
  }

  absl::StatusOr<std::string_view> AttrWord(const AttrAst& attr) const {
    if (attr.end - attr.begin != 1 || tokens_[attr.begin].kind != TokenKind::kWord) {
      return MalformedAttr(attr, "expected one word");
    }
    return tokens_[attr.begin].text;
  }

  // Reads the tokens of one attribute value from left to right.
  class ValueReader {
   public:
    ValueReader(const Parser& parser, const AttrAst& attr)
        : parser_(parser), attr_(attr), i_(attr.begin) {}

    bool AtEnd() const { return i_ >= attr_.end; }
    const Token& Peek() const { return parser_.tokens_[std::min(i_, attr_.end - 1)]; }
    bool Consume(std::string_view p) {
      if (AtEnd() || !IsPunct(Peek(), p)) return false;
      ++i_;
      return true;
    }
    absl::Status Expect(std::string_view p) {
      if (Consume(p)) return absl::OkStatus();
      return Error(Cat("expected \"", p, "\", got ", AtEnd() ? "the end" : Quote(Peek())));
    }
    bool ConsumeWord(std::string_view w) {
      if (AtEnd() || !IsWord(Peek(), w)) return false;
      ++i_;
      return true;
    }
    absl::Status ExpectEnd() {
      if (AtEnd()) return absl::OkStatus();
      return Error(Cat("unexpected ", Quote(Peek())));
    }
    absl::StatusOr<int64_t> Int() {
      if (AtEnd()) return Error("expected an integer, got the end");
      const Token& t = parser_.tokens_[i_];
      int64_t value = 0;
      if (t.kind != TokenKind::kWord || !ToInt(t.text, &value)) {
        return Error(Cat("expected an integer, got ", Quote(t)));
      }
      ++i_;
      return value;
    }
    // `open` int ("," int)* `close`, or an empty list.
    absl::StatusOr<std::vector<int64_t>> Ints(std::string_view open, std::string_view close) {
      TESSEL_RETURN_IF_ERROR(Expect(open));
      std::vector<int64_t> values;
      if (Consume(close)) return values;
      while (true) {
        TESSEL_ASSIGN_OR_RETURN(int64_t v, Int());
        values.push_back(v);
        if (Consume(close)) return values;
        TESSEL_RETURN_IF_ERROR(Expect(","));
      }
    }
    absl::Status Error(std::string_view why) const { return parser_.MalformedAttr(attr_, why); }
    void Skip() { ++i_; }

   private:
    const Parser& parser_;
    const AttrAst& attr_;
    size_t i_;
  };

  // "{1,2,3}" or "{}".
  absl::StatusOr<std::vector<int64_t>> AttrIntList(const AttrAst& attr) const {
    ValueReader r(*this, attr);
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> values, r.Ints("{", "}"));
    TESSEL_RETURN_IF_ERROR(r.ExpectEnd());
    return values;
  }

  // "{[0:4], [2:8:2]}".
  absl::StatusOr<std::vector<SliceDim>> AttrSlice(const AttrAst& attr) const {
    ValueReader r(*this, attr);
    std::vector<SliceDim> dims;
    TESSEL_RETURN_IF_ERROR(r.Expect("{"));
    if (!r.Consume("}")) {
      while (true) {
        SliceDim s;
        TESSEL_RETURN_IF_ERROR(r.Expect("["));
        TESSEL_ASSIGN_OR_RETURN(s.start, r.Int());
        TESSEL_RETURN_IF_ERROR(r.Expect(":"));
        TESSEL_ASSIGN_OR_RETURN(s.limit, r.Int());
        if (r.Consume(":")) {
          TESSEL_ASSIGN_OR_RETURN(s.stride, r.Int());
        }
        TESSEL_RETURN_IF_ERROR(r.Expect("]"));
        dims.push_back(s);
        if (r.Consume("}")) break;
        TESSEL_RETURN_IF_ERROR(r.Expect(","));
      }
    }
    TESSEL_RETURN_IF_ERROR(r.ExpectEnd());
    return dims;
  }

  // "{{0,1},{2,3}}" or "{}".
  absl::StatusOr<std::vector<std::vector<int64_t>>> AttrNestedIntLists(const AttrAst& attr) const {
    ValueReader r(*this, attr);
    std::vector<std::vector<int64_t>> lists;
    TESSEL_RETURN_IF_ERROR(r.Expect("{"));
    if (!r.Consume("}")) {
      while (true) {
        TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> list, r.Ints("{", "}"));
        lists.push_back(std::move(list));
        if (r.Consume("}")) break;
        TESSEL_RETURN_IF_ERROR(r.Expect(","));
      }
    }
    TESSEL_RETURN_IF_ERROR(r.ExpectEnd());
    return lists;
  }

  // replica_groups: "{{0,1},{2,3}}", or XLA's iota form "[G,S]<=[d0,d1,...]" with an optional
  // transpose "T(p0,p1,...)": the device ids 0..N-1 laid out as [d0,d1,...], transposed by the
  // permutation, flattened and cut into G groups of S (XLA IotaReplicaGroupList).
  absl::StatusOr<std::vector<std::vector<int64_t>>> AttrReplicaGroups(const AttrAst& attr) const {
    if (attr.begin == attr.end || !IsPunct(tokens_[attr.begin], "[")) {
      TESSEL_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> groups, AttrNestedIntLists(attr));
      for (const std::vector<int64_t>& group : groups) {
        for (int64_t id : group) {
          if (id >= kMaxDevices) {
            return MalformedAttr(attr, Cat("device id ", id, " is not below ", kMaxDevices));
          }
        }
      }
      return groups;
    }
    ValueReader r(*this, attr);
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> group_dims, r.Ints("[", "]"));
    TESSEL_RETURN_IF_ERROR(r.Expect("<"));
    TESSEL_RETURN_IF_ERROR(r.Expect("="));
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> reshape_dims, r.Ints("[", "]"));
    const int64_t rank = static_cast<int64_t>(reshape_dims.size());
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < rank; ++i) perm.push_back(i);
    if (r.ConsumeWord("T")) {
      TESSEL_ASSIGN_OR_RETURN(perm, r.Ints("(", ")"));
    }
    TESSEL_RETURN_IF_ERROR(r.ExpectEnd());
    if (group_dims.size() != 2) return r.Error("expected [groups,group_size] before \"<=\"");
    int64_t num_devices = 1;
    for (int64_t d : reshape_dims) {
      if (d <= 0 || d > kMaxDevices || num_devices * d > kMaxDevices) {
        return r.Error(Cat("the device array must hold 1 to ", kMaxDevices, " devices"));
      }
      num_devices *= d;
    }
    if (group_dims[0] <= 0 || group_dims[1] <= 0 || group_dims[0] > kMaxDevices ||
        group_dims[1] > kMaxDevices || group_dims[0] * group_dims[1] != num_devices) {
      return r.Error(Cat("[", group_dims[0], ",", group_dims[1], "] groups do not hold the ",
                         num_devices, " devices"));
    }
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < rank; ++i) {
      if (static_cast<int64_t>(sorted.size()) != rank || sorted[i] != i) {
        return r.Error(Cat("T(...) is not a permutation of ", rank, " dims"));
      }
    }
    return ExpandIotaReplicaGroups(
        IotaReplicaGroups{group_dims[0], group_dims[1], std::move(reshape_dims), std::move(perm)});
  }

  // source_target_pairs: "{{0,1},{1,2}}".
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> AttrPairs(const AttrAst& attr) const {
    TESSEL_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> lists, AttrNestedIntLists(attr));
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (const std::vector<int64_t>& list : lists) {
      if (list.size() != 2) return MalformedAttr(attr, "expected {source,target} pairs");
      pairs.emplace_back(list[0], list[1]);
    }
    return pairs;
  }

  // "0_1_0x2_2_1"; empty for rank 0.
  absl::StatusOr<std::vector<PadDim>> AttrPadding(const AttrAst& attr) const {
    std::vector<PadDim> padding;
    if (attr.begin == attr.end) return padding;
    TESSEL_ASSIGN_OR_RETURN(std::string_view text, AttrWord(attr));
    for (absl::string_view dim : absl::StrSplit(Av(text), 'x')) {
      std::vector<absl::string_view> parts = absl::StrSplit(dim, '_');
      PadDim p;
      if ((parts.size() != 2 && parts.size() != 3) || !absl::SimpleAtoi(parts[0], &p.low) ||
          !absl::SimpleAtoi(parts[1], &p.high) ||
          (parts.size() == 3 && !absl::SimpleAtoi(parts[2], &p.interior))) {
        return MalformedAttr(attr,
                             Cat("expected low_high or low_high_interior, got ", Quote(Sv(dim))));
      }
      padding.push_back(p);
    }
    return padding;
  }

  // --- build ---
  absl::Status InstrError(absl::StatusCode code, const InstrAst& instr,
                          std::string_view why) const {
    return LineError(code, instr.name->line,
                     Cat("%", StripPercent(instr.name->text), ": ", std::string(why)));
  }

  // "true" or "false".
  absl::StatusOr<bool> AttrBool(const AttrAst& attr) const {
    TESSEL_ASSIGN_OR_RETURN(std::string_view word, AttrWord(attr));
    if (word == "true") return true;
    if (word == "false") return false;
    return MalformedAttr(attr, "expected true or false");
  }

  // gather's dimension numbers: offset_dims, collapsed_slice_dims, start_index_map,
  // index_vector_dim and slice_sizes are required; the batching dims default to {}.
  template <typename Find, typename Require>
  absl::Status GatherAttributes(const Find& find, const Require& require,
                                GatherDimensionNumbers* g) const {
    const std::pair<std::string_view, std::vector<int64_t>*> required[] = {
        {"offset_dims", &g->offset_dims},
        {"collapsed_slice_dims", &g->collapsed_slice_dims},
        {"start_index_map", &g->start_index_map},
        {"slice_sizes", &g->slice_sizes}};
    for (const auto& [name, dims] : required) {
      TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require(name));
      TESSEL_ASSIGN_OR_RETURN(*dims, AttrIntList(*attr));
    }
    const std::pair<std::string_view, std::vector<int64_t>*> optional[] = {
        {"operand_batching_dims", &g->operand_batching_dims},
        {"start_indices_batching_dims", &g->start_indices_batching_dims}};
    for (const auto& [name, dims] : optional) {
      if (const AttrAst* attr = find(name)) {
        TESSEL_ASSIGN_OR_RETURN(*dims, AttrIntList(*attr));
      }
    }
    TESSEL_ASSIGN_OR_RETURN(const AttrAst* ivd, require("index_vector_dim"));
    TESSEL_ASSIGN_OR_RETURN(g->index_vector_dim, AttrInt(*ivd));
    if (const AttrAst* attr = find("indices_are_sorted")) {
      TESSEL_ASSIGN_OR_RETURN(g->indices_are_sorted, AttrBool(*attr));
    }
    return absl::OkStatus();
  }

  // scatter's dimension numbers: update_window_dims, inserted_window_dims,
  // scatter_dims_to_operand_dims and index_vector_dim are required; the batching dims default
  // to {}.
  template <typename Find, typename Require>
  absl::Status ScatterAttributes(const Find& find, const Require& require,
                                 ScatterDimensionNumbers* s) const {
    const std::pair<std::string_view, std::vector<int64_t>*> required[] = {
        {"update_window_dims", &s->update_window_dims},
        {"inserted_window_dims", &s->inserted_window_dims},
        {"scatter_dims_to_operand_dims", &s->scatter_dims_to_operand_dims}};
    for (const auto& [name, dims] : required) {
      TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require(name));
      TESSEL_ASSIGN_OR_RETURN(*dims, AttrIntList(*attr));
    }
    const std::pair<std::string_view, std::vector<int64_t>*> optional[] = {
        {"input_batching_dims", &s->input_batching_dims},
        {"scatter_indices_batching_dims", &s->scatter_indices_batching_dims}};
    for (const auto& [name, dims] : optional) {
      if (const AttrAst* attr = find(name)) {
        TESSEL_ASSIGN_OR_RETURN(*dims, AttrIntList(*attr));
      }
    }
    TESSEL_ASSIGN_OR_RETURN(const AttrAst* ivd, require("index_vector_dim"));
    TESSEL_ASSIGN_OR_RETURN(s->index_vector_dim, AttrInt(*ivd));
    const std::pair<std::string_view, bool*> flags[] = {
        {"indices_are_sorted", &s->indices_are_sorted}, {"unique_indices", &s->unique_indices}};
    for (const auto& [name, flag] : flags) {
      if (const AttrAst* attr = find(name)) {
        TESSEL_ASSIGN_OR_RETURN(*flag, AttrBool(*attr));
      }
    }
    return absl::OkStatus();
  }

  // window={...} (convolution, reduce-window, select-and-scatter; a missing window is rank 0),
  // reduce-window's to_apply and select-and-scatter's scatter (into `to_apply`), and
  // convolution's dim_labels, feature_group_count, batch_group_count.
  template <typename Find, typename Require>
  absl::Status WindowedAttributes(Opcode opcode, const Find& find, const Require& require,
                                  OpAttributes* attrs, const AttrAst** to_apply) const {
    if (const AttrAst* attr = find("window")) {
      std::string_view text = AttrValueText(*attr);
      if (text.size() < 2 || text.front() != '{' || text.back() != '}') {
        return MalformedAttr(*attr, "expected {size=... stride=... pad=...}");
      }
      absl::StatusOr<std::vector<WindowDim>> window = ParseWindow(text.substr(1, text.size() - 2));
      if (!window.ok()) return MalformedAttr(*attr, Sv(window.status().message()));
      attrs->window = *std::move(window);
    }
    if (opcode == Opcode::kReduceWindow) {
      TESSEL_ASSIGN_OR_RETURN(*to_apply, require("to_apply"));
      return absl::OkStatus();
    }
    if (opcode == Opcode::kSelectAndScatter) {
      TESSEL_ASSIGN_OR_RETURN(*to_apply, require("scatter"));
      return absl::OkStatus();
    }
    TESSEL_ASSIGN_OR_RETURN(const AttrAst* labels, require("dim_labels"));
    absl::StatusOr<ConvolutionDimensionNumbers> dnums = ParseDimLabels(AttrValueText(*labels));
    if (!dnums.ok()) return MalformedAttr(*labels, Sv(dnums.status().message()));
    attrs->convolution = *std::move(dnums);
    const std::pair<std::string_view, int64_t*> counts[] = {
        {"feature_group_count", &attrs->feature_group_count},
        {"batch_group_count", &attrs->batch_group_count}};
    for (const auto& [name, count] : counts) {
      if (const AttrAst* attr = find(name)) {
        TESSEL_ASSIGN_OR_RETURN(*count, AttrInt(*attr));
      }
    }
    return absl::OkStatus();
  }

  // sort: dimensions, is_stable, to_apply (resolved by the caller); topk: k, largest.
  template <typename Find, typename Require>
  absl::Status SortAttributes(Opcode opcode, const Find& find, const Require& require,
                              OpAttributes* attrs, const AttrAst** to_apply) const {
    if (opcode == Opcode::kTopK) {
      TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("k"));
      TESSEL_ASSIGN_OR_RETURN(attrs->topk_k, AttrInt(*attr));
      if (const AttrAst* largest = find("largest")) {
        TESSEL_ASSIGN_OR_RETURN(attrs->topk_largest, AttrBool(*largest));
      }
      return absl::OkStatus();
    }
    TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("dimensions"));
    TESSEL_ASSIGN_OR_RETURN(attrs->dimensions, AttrIntList(*attr));
    if (const AttrAst* stable = find("is_stable")) {
      TESSEL_ASSIGN_OR_RETURN(attrs->is_stable, AttrBool(*stable));
    }
    TESSEL_ASSIGN_OR_RETURN(*to_apply, require("to_apply"));
    return absl::OkStatus();
  }

  // Collectives: channel_id (>= 0) and use_global_device_ids, kept for the printer.
  template <typename Find>
  absl::Status ChannelAttributes(const Find& find, OpAttributes* attrs) const {
    if (const AttrAst* attr = find("channel_id")) {
      TESSEL_ASSIGN_OR_RETURN(attrs->channel_id, AttrInt(*attr));
      if (attrs->channel_id < 0) return MalformedAttr(*attr, "expected a channel id >= 0");
    }
    if (const AttrAst* attr = find("use_global_device_ids")) {
      TESSEL_ASSIGN_OR_RETURN(attrs->use_global_device_ids, AttrBool(*attr));
    }
    return absl::OkStatus();
  }

  // Collectives: replica_groups (a missing one reads as {}: XLA's all devices; shape inference
  // decides), dimensions, to_apply, source_target_pairs, channel_id, use_global_device_ids.
  template <typename Find, typename Require>
  absl::Status CollectiveAttributes(Opcode opcode, const Find& find, const Require& require,
                                    OpAttributes* attrs, const AttrAst** to_apply) const {
    if (opcode == Opcode::kCollectivePermute) {
      if (const AttrAst* attr = find("source_target_pairs")) {
        TESSEL_ASSIGN_OR_RETURN(attrs->source_target_pairs, AttrPairs(*attr));
      }
      return ChannelAttributes(find, attrs);
    }
    if (const AttrAst* attr = find("replica_groups")) {
      TESSEL_ASSIGN_OR_RETURN(attrs->replica_groups, AttrReplicaGroups(*attr));
    }
    if (opcode != Opcode::kAllReduce) {
      TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("dimensions"));
      TESSEL_ASSIGN_OR_RETURN(attrs->dimensions, AttrIntList(*attr));
    }
    if (opcode == Opcode::kAllReduce || opcode == Opcode::kReduceScatter) {
      TESSEL_ASSIGN_OR_RETURN(*to_apply, require("to_apply"));
    }
    return ChannelAttributes(find, attrs);
  }

  // Fills `attrs` (and the sharding, to_apply) from the attribute list of `instr`.
  absl::Status ApplyAttributes(const InstrAst& instr, OpAttributes* attrs, std::string* sharding,
                               const AttrAst** to_apply) const {
    absl::flat_hash_map<std::string_view, const AttrAst*> by_name;
    for (const AttrAst& attr : instr.attrs) {
      if (!by_name.emplace(attr.name->text, &attr).second) {
        return SyntaxError(attr.name->line, Cat("duplicate attribute ", Quote(attr.name->text),
                                                " on %", StripPercent(instr.name->text)));
      }
    }
    auto find = [&](std::string_view name) -> const AttrAst* {
      auto it = by_name.find(name);
      return it == by_name.end() ? nullptr : it->second;
    };
    auto require = [&](std::string_view name) -> absl::StatusOr<const AttrAst*> {
      const AttrAst* attr = find(name);
      if (attr == nullptr) {
        return InstrError(absl::StatusCode::kInvalidArgument, instr,
                          Cat(OpcodeName(instr.opcode), " needs attribute ", Quote(name)));
      }
      return attr;
    };

    if (const AttrAst* attr = find("sharding")) {
      if (attr->begin == attr->end) return MalformedAttr(*attr, "expected {...}");
      *sharding = std::string(AttrValueText(*attr));
    }
    switch (instr.opcode) {
      case Opcode::kIota: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("iota_dimension"));
        TESSEL_ASSIGN_OR_RETURN(attrs->iota_dimension, AttrInt(*attr));
        break;
      }
      case Opcode::kReducePrecision: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* exponent, require("exponent_bits"));
        TESSEL_ASSIGN_OR_RETURN(attrs->exponent_bits, AttrInt(*exponent));
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* mantissa, require("mantissa_bits"));
        TESSEL_ASSIGN_OR_RETURN(attrs->mantissa_bits, AttrInt(*mantissa));
        break;
      }
      case Opcode::kRng: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("distribution"));
        TESSEL_ASSIGN_OR_RETURN(std::string_view d, AttrWord(*attr));
        if (d == "rng_uniform") {
          attrs->rng_distribution = RngDistribution::kUniform;
        } else if (d == "rng_normal") {
          attrs->rng_distribution = RngDistribution::kNormal;
        } else {
          return MalformedAttr(*attr, "expected rng_uniform or rng_normal");
        }
        if (const AttrAst* seed = find("rng_seed")) {
          if (seed->end - seed->begin != 1 || !ToInt(tokens_[seed->begin].text, &attrs->rng_seed)) {
            return MalformedAttr(*seed, "expected an unsigned 64-bit integer");
          }
        }
        break;
      }
      case Opcode::kCompare: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("direction"));
        TESSEL_ASSIGN_OR_RETURN(std::string_view d, AttrWord(*attr));
        bool found = false;
        for (ComparisonDirection c :
             {ComparisonDirection::kEq, ComparisonDirection::kNe, ComparisonDirection::kLt,
              ComparisonDirection::kLe, ComparisonDirection::kGt, ComparisonDirection::kGe}) {
          if (ComparisonDirectionName(c) == d) {
            attrs->comparison_direction = c;
            found = true;
          }
        }
        if (!found) return MalformedAttr(*attr, "expected EQ, NE, LT, LE, GT or GE");
        break;
      }
      case Opcode::kBroadcast:
      case Opcode::kReverse:
      case Opcode::kTranspose:
      case Opcode::kConcatenate:
      case Opcode::kReduce: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("dimensions"));
        TESSEL_ASSIGN_OR_RETURN(attrs->dimensions, AttrIntList(*attr));
        if (instr.opcode == Opcode::kReduce) {
          TESSEL_ASSIGN_OR_RETURN(*to_apply, require("to_apply"));
        }
        break;
      }
      case Opcode::kSlice: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("slice"));
        TESSEL_ASSIGN_OR_RETURN(attrs->slice, AttrSlice(*attr));
        break;
      }
      case Opcode::kPad:
        if (const AttrAst* attr = find("padding")) {
          TESSEL_ASSIGN_OR_RETURN(attrs->padding, AttrPadding(*attr));
        }
        break;
      case Opcode::kDynamicSlice: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("dynamic_slice_sizes"));
        TESSEL_ASSIGN_OR_RETURN(attrs->dynamic_slice_sizes, AttrIntList(*attr));
        break;
      }
      case Opcode::kDot: {
        const std::pair<std::string_view, std::vector<int64_t>*> lists[] = {
            {"lhs_batch_dims", &attrs->dot.lhs_batch_dims},
            {"lhs_contracting_dims", &attrs->dot.lhs_contracting_dims},
            {"rhs_batch_dims", &attrs->dot.rhs_batch_dims},
            {"rhs_contracting_dims", &attrs->dot.rhs_contracting_dims}};
        for (const auto& [name, dims] : lists) {
          if (const AttrAst* attr = find(name)) {
            TESSEL_ASSIGN_OR_RETURN(*dims, AttrIntList(*attr));
          }
        }
        break;
      }
      case Opcode::kGather:
        TESSEL_RETURN_IF_ERROR(GatherAttributes(find, require, &attrs->gather));
        break;
      case Opcode::kScatter: {
        TESSEL_RETURN_IF_ERROR(ScatterAttributes(find, require, &attrs->scatter));
        TESSEL_ASSIGN_OR_RETURN(*to_apply, require("to_apply"));
        break;
      }
      case Opcode::kConvolution:
      case Opcode::kReduceWindow:
      case Opcode::kSelectAndScatter:
        TESSEL_RETURN_IF_ERROR(WindowedAttributes(instr.opcode, find, require, attrs, to_apply));
        break;
      case Opcode::kSort:
      case Opcode::kTopK:
        TESSEL_RETURN_IF_ERROR(SortAttributes(instr.opcode, find, require, attrs, to_apply));
        break;
      case Opcode::kGetTupleElement: {
        TESSEL_ASSIGN_OR_RETURN(const AttrAst* attr, require("index"));
        TESSEL_ASSIGN_OR_RETURN(attrs->tuple_index, AttrInt(*attr));
        break;
      }
      case Opcode::kAllReduce:
      case Opcode::kAllGather:
      case Opcode::kReduceScatter:
      case Opcode::kAllToAll:
      case Opcode::kCollectivePermute:
        TESSEL_RETURN_IF_ERROR(CollectiveAttributes(instr.opcode, find, require, attrs, to_apply));
        break;
      default:
        break;
    }
    return absl::OkStatus();
  }

  // Parses a constant's literal text for `shape`; tuple literals are "(a, b, ...)".
  absl::StatusOr<Literal> ParseConstant(const Shape& shape, std::string_view raw, int line) const {
    raw = Strip(raw);
    if (!shape.is_tuple()) {
      // Every element needs at least one character: bounds the allocation by the text size.
      if (shape.num_elements() > static_cast<int64_t>(raw.size())) {
        return SyntaxError(
            line, Cat("constant ", Quote(raw), " has too few values for ", shape.ToString()));
      }
      absl::StatusOr<Literal> literal = ParseLiteralValues(shape, raw);
      if (!literal.ok()) return SyntaxError(line, Sv(literal.status().message()));
      return literal;
    }
    if (raw.size() < 2 || raw.front() != '(' || raw.back() != ')') {
      return SyntaxError(line, Cat("expected a tuple literal \"(...)\" for ", shape.ToString(),
                                   ", got ", Quote(raw)));
    }
    std::string_view inner = raw.substr(1, raw.size() - 2);
    std::vector<std::string_view> parts;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i < inner.size(); ++i) {
      char c = inner[i];
      if (c == '(' || c == '{') ++depth;
      if (c == ')' || c == '}') --depth;
      if (c == ',' && depth == 0) {
        parts.push_back(inner.substr(start, i - start));
        start = i + 1;
      }
    }
    if (!Strip(inner).empty() || !parts.empty()) {
      parts.push_back(inner.substr(start));
    }
    if (parts.size() != shape.tuple_shapes().size()) {
      return SyntaxError(line,
                         Cat("tuple literal ", Quote(raw), " has ", parts.size(), " elements but ",
                             shape.ToString(), " has ", shape.tuple_shapes().size()));
    }
    std::vector<Literal> elements;
    for (size_t i = 0; i < parts.size(); ++i) {
      TESSEL_ASSIGN_OR_RETURN(Literal e, ParseConstant(shape.tuple_shapes()[i], parts[i], line));
      elements.push_back(std::move(e));
    }
    return Literal::Tuple(std::move(elements));
  }

  // Recognises a to_apply computation: ROOT = op(param0, param1) for one of the six reductions.
  absl::StatusOr<Reduction> ClassifyReduction(const CompAst& comp) const {
    std::string name(StripPercent(comp.name->text));
    const InstrAst* root = &comp.instrs.back();
    for (const InstrAst& instr : comp.instrs) {
      if (instr.is_root) root = &instr;
    }
    auto unimplemented = [&](std::string_view why) {
      return LineError(
          absl::StatusCode::kUnimplemented, root->name->line,
          Cat("to_apply computation %", name, " is not a supported reduction: ", std::string(why)));
    };
    // A reducer is a function of two scalars (XLA's shape inference for reduce and scatter
    // requires 2N parameters for N operands; variadic forms are not supported here). Anything
    // else it holds would be ignored by the pattern below, so a call from it (which could also
    // recurse) or a third parameter is refused rather than silently dropped.
    int parameters = 0;
    for (const InstrAst& instr : comp.instrs) {
      if (instr.is_call || instr.is_custom_call || FindAttr(instr, "to_apply") != nullptr ||
          FindAttr(instr, "calls") != nullptr || FindAttr(instr, "body") != nullptr ||
          FindAttr(instr, "branch_computations") != nullptr ||
          FindAttr(instr, "true_computation") != nullptr) {
        return unimplemented(Cat("%", StripPercent(instr.name->text), " calls a computation"));
      }
      if (instr.opcode != Opcode::kParameter) continue;
      ++parameters;
      if (instr.shape.is_tuple() || instr.shape.rank() != 0) {
        return unimplemented(Cat("parameter %", StripPercent(instr.name->text), " has shape ",
                                 instr.shape.ToString(), ", not a scalar"));
      }
    }
    auto check_parameter_count = [&]() -> absl::Status {
      if (parameters == 2) return absl::OkStatus();
      return unimplemented(
          Cat("it takes ", parameters, " parameters, not two (variadic reduce is not supported)"));
    };
    Reduction r;
    int64_t root_number = -1;
    if (root->opcode == Opcode::kParameter && ToInt(root->raw_operands, &root_number) &&
        root_number == 1 && !root->shape.is_tuple() && root->shape.rank() == 0) {
      r.overwrite = true;
      r.dtype = root->shape.dtype();
      TESSEL_RETURN_IF_ERROR(check_parameter_count());
      return r;
    }
    switch (root->opcode) {
      case Opcode::kAdd:
        r.kind = ReduceKind::kAdd;
        break;
      case Opcode::kMultiply:
        r.kind = ReduceKind::kMultiply;
        break;
      case Opcode::kMaximum:
        r.kind = ReduceKind::kMaximum;
        break;
      case Opcode::kMinimum:
        r.kind = ReduceKind::kMinimum;
        break;
      case Opcode::kAnd:
        r.kind = ReduceKind::kAnd;
        break;
      case Opcode::kOr:
        r.kind = ReduceKind::kOr;
        break;
      default:
        return unimplemented(Cat("its root is ", OpcodeName(root->opcode),
                                 ", not add, multiply, maximum, minimum, and, or, or (for "
                                 "scatter) parameter(1)"));
    }
    if (root->shape.is_tuple() || root->shape.rank() != 0) {
      return unimplemented(Cat("its root has shape ", root->shape.ToString(),
                               ", not a scalar (variadic reduce is not supported)"));
    }
    r.dtype = root->shape.dtype();
    if (root->operands.size() != 2) return unimplemented("its root does not have two operands");
    std::vector<int64_t> numbers;
    for (const OperandAst& operand : root->operands) {
      std::string_view operand_name = StripPercent(operand.name->text);
      const InstrAst* def = nullptr;
      for (const InstrAst& instr : comp.instrs) {
        if (StripPercent(instr.name->text) == operand_name) def = &instr;
      }
      int64_t number = -1;
      if (def == nullptr || def->opcode != Opcode::kParameter ||
          !ToInt(def->raw_operands, &number)) {
        return unimplemented(
            Cat("root operand %", operand_name, " is not a parameter of the computation"));
      }
      numbers.push_back(number);
    }
    std::sort(numbers.begin(), numbers.end());
    if (numbers != std::vector<int64_t>{0, 1}) {
      return unimplemented("the root must combine parameter(0) and parameter(1)");
    }
    TESSEL_RETURN_IF_ERROR(check_parameter_count());
    return r;
  }

  // Recognises select-and-scatter's `select`: ROOT = compare(param0, param1), direction=D
  // (operands swapped flip D). Returns the direction for (param0, param1).
  absl::StatusOr<ComparisonDirection> ResolveSelect(const InstrAst& instr,
                                                    const AttrAst& attr) const {
    TESSEL_ASSIGN_OR_RETURN(std::string_view word, AttrWord(attr));
    auto it = comp_by_name_.find(std::string(StripPercent(word)));
    if (it == comp_by_name_.end() || comps_[it->second].is_entry) {
      return SyntaxError(attr.name->line, Cat("unknown computation ", Quote(word),
                                              " in select of %", StripPercent(instr.name->text)));
    }
    const CompAst& comp = comps_[it->second];
    const InstrAst* root = &comp.instrs.back();
    for (const InstrAst& i : comp.instrs) {
      if (i.is_root) root = &i;
    }
    auto unimplemented = [&](std::string_view why) {
      return LineError(absl::StatusCode::kUnimplemented, root->name->line,
                       Cat("select computation ", Quote(word),
                           " is not a supported selection: ", std::string(why)));
    };
    if (root->opcode != Opcode::kCompare || root->operands.size() != 2) {
      return unimplemented("its root must be compare(parameter(0), parameter(1))");
    }
    std::vector<int64_t> numbers;
    for (const OperandAst& operand : root->operands) {
      std::string_view operand_name = StripPercent(operand.name->text);
      int64_t number = -1;
      for (const InstrAst& i : comp.instrs) {
        if (StripPercent(i.name->text) == operand_name && i.opcode == Opcode::kParameter) {
          if (!ToInt(i.raw_operands, &number)) number = -1;
        }
      }
      numbers.push_back(number);
    }
    const bool swapped = numbers == std::vector<int64_t>{1, 0};
    if (!swapped && numbers != std::vector<int64_t>{0, 1}) {
      return unimplemented("the compare must take parameter(0) and parameter(1)");
    }
    const AttrAst* direction = FindAttr(*root, "direction");
    if (direction == nullptr) return unimplemented("the compare has no direction");
    TESSEL_ASSIGN_OR_RETURN(std::string_view d, AttrWord(*direction));
    const std::pair<std::string_view, ComparisonDirection> table[] = {
        {"GE", ComparisonDirection::kGe},
        {"GT", ComparisonDirection::kGt},
        {"LE", ComparisonDirection::kLe},
        {"LT", ComparisonDirection::kLt}};
    for (const auto& [name, dir] : table) {
      if (d != name) continue;
      if (!swapped) return dir;
      switch (dir) {
        case ComparisonDirection::kGe:
          return ComparisonDirection::kLe;
        case ComparisonDirection::kGt:
          return ComparisonDirection::kLt;
        case ComparisonDirection::kLe:
          return ComparisonDirection::kGe;
        default:
          return ComparisonDirection::kGt;
      }
    }
    return unimplemented(Cat("direction=", d, "; expected GE, GT, LE or LT"));
  }

  // sort's to_apply: recognised when its root is `compare` LT or GT of a value computed from
  // parameter(0) alone and one computed from parameter(1) alone (the canonicalizing selects of
  // JAX's total-order comparators may stand between), i.e. an order on operand 0. Returns
  // whether it sorts descending. Anything else (several keys, a custom order) is kUnimplemented,
  // naming the computation.
  absl::StatusOr<bool> ResolveComparator(const InstrAst& instr, const AttrAst& attr) const {
    TESSEL_ASSIGN_OR_RETURN(std::string_view word, AttrWord(attr));
    auto it = comp_by_name_.find(std::string(StripPercent(word)));
    if (it == comp_by_name_.end() || comps_[it->second].is_entry) {
      return SyntaxError(attr.name->line, Cat("unknown computation ", Quote(word),
                                              " in to_apply of %", StripPercent(instr.name->text)));
    }
    const CompAst& comp = comps_[it->second];
    auto unsupported = [&](std::string_view why) {
      return LineError(absl::StatusCode::kUnimplemented, comp.name->line,
                       Cat("sort comparator ", Quote(comp.name->text), " is not supported: ", why,
                           " (supported: compare LT or GT of parameter(0) with parameter(1), "
                           "directly or through canonicalizing ops)"));
    };
    // Bit k: depends on parameter(k).
    absl::flat_hash_map<std::string, uint64_t> depends;
    const InstrAst* root = &comp.instrs.back();
    for (const InstrAst& i : comp.instrs) {
      uint64_t mask = 0;
      if (i.is_call || i.is_custom_call) return unsupported("it calls another computation");
      if (i.opcode == Opcode::kParameter) {
        int64_t number = 0;
        if (!ToInt(Strip(i.raw_operands), &number) || number < 0 || number >= 64) {
          return unsupported("a parameter number outside 0..63");
        }
        mask = uint64_t{1} << number;
      }
      for (const OperandAst& operand : i.operands) {
        auto found = depends.find(std::string(StripPercent(operand.name->text)));
        if (found != depends.end()) mask |= found->second;
      }
      depends[std::string(StripPercent(i.name->text))] = mask;
      if (i.is_root) root = &i;
    }
    if (root->opcode != Opcode::kCompare || root->operands.size() != 2) {
      return unsupported(Cat("its root is ", Quote(root->opcode_token->text), ", not compare"));
    }
    const AttrAst* direction = FindAttr(*root, "direction");
    std::string_view dir = "";
    if (direction != nullptr) {
      TESSEL_ASSIGN_OR_RETURN(dir, AttrWord(*direction));
    }
    if (dir != "LT" && dir != "GT") return unsupported(Cat("direction ", Quote(dir)));
    const uint64_t a = depends[std::string(StripPercent(root->operands[0].name->text))];
    const uint64_t b = depends[std::string(StripPercent(root->operands[1].name->text))];
    if (a == 1 && b == 2) return dir == "GT";
    if (a == 2 && b == 1) return dir == "LT";
    return unsupported("the compared values do not come from parameter(0) and parameter(1) alone");
  }

  absl::StatusOr<Reduction> ResolveToApply(const InstrAst& instr, const AttrAst& attr) {
    TESSEL_ASSIGN_OR_RETURN(std::string_view word, AttrWord(attr));
    std::string name(StripPercent(word));
    auto it = comp_by_name_.find(name);
    if (it == comp_by_name_.end() || comps_[it->second].is_entry) {
      return SyntaxError(attr.name->line, Cat("unknown computation ", Quote(word),
                                              " in to_apply of %", StripPercent(instr.name->text)));
    }
    auto cached = reductions_.find(name);
    if (cached != reductions_.end()) return cached->second;
    TESSEL_ASSIGN_OR_RETURN(Reduction r, ClassifyReduction(comps_[it->second]));
    reductions_.emplace(name, r);
    return r;
  }

  absl::StatusOr<std::unique_ptr<Graph>> BuildEntry() {
    const CompAst* entry = nullptr;
    for (size_t i = 0; i < comps_.size(); ++i) {
      const CompAst& comp = comps_[i];
      std::string name(StripPercent(comp.name->text));
      if (!comp_by_name_.emplace(name, i).second) {
        return SyntaxError(comp.name->line,
                           Cat("duplicate computation name ", Quote(comp.name->text)));
      }
      if (comp.is_entry) {
        if (entry != nullptr) {
          return SyntaxError(comp.name->line,
                             Cat("second ENTRY computation ", Quote(comp.name->text),
                                 " (the first is on line ", entry->name->line, ")"));
        }
        entry = &comp;
      }
    }
    if (entry == nullptr) {
      return SyntaxError(tokens_.back().line,
                         "missing ENTRY computation: no computation is marked \"ENTRY\"");
    }

    auto graph = std::make_unique<Graph>(module_name_);
    std::vector<const CompAst*> call_stack;
    TESSEL_ASSIGN_OR_RETURN(Node * root,
                            BuildComputation(*entry, graph.get(), /*args=*/nullptr, call_stack));
    graph->set_root(root);
    absl::Status status = Verify(*graph);
    if (!status.ok()) {
      return SyntaxError(entry->name->line,
                         Cat("in ENTRY ", entry->name->text, ": ", Sv(status.message())));
    }
    return graph;
  }

  // The instructions of one computation, added to `graph`. The ENTRY (`args` null) makes its
  // parameters graph parameters; a computation inlined for a `call` (`args` given) reads
  // parameter(k) as args[k]. Returns the computation's root node.
  struct Scope {
    const std::vector<Node*>* args = nullptr;
    absl::flat_hash_map<std::string, Node*> nodes;  // instruction name -> its node
    absl::flat_hash_map<std::string, int> line_of;
    absl::flat_hash_map<int64_t, const InstrAst*> parameter_numbers;
  };

  absl::StatusOr<Node*> BuildComputation(const CompAst& comp, Graph* graph,
                                         const std::vector<Node*>* args,
                                         std::vector<const CompAst*>& call_stack) {
    Scope scope;
    scope.args = args;
    Node* root = nullptr;
    for (const InstrAst& instr : comp.instrs) {
      TESSEL_ASSIGN_OR_RETURN(Node * node, BuildInstruction(instr, graph, scope, call_stack));
      if (instr.is_root) root = node;
    }
    const int64_t num_parameters = static_cast<int64_t>(scope.parameter_numbers.size());
    for (const auto& [number, instr] : scope.parameter_numbers) {
      if (number >= num_parameters) {
        return SyntaxError(instr->name->line,
                           Cat("parameter number ", number, " of ", Quote(instr->name->text),
                               " is out of range: the ", num_parameters,
                               " parameters must be numbered 0..", num_parameters - 1));
      }
    }
    // XLA: without a ROOT marker the last instruction is the root.
    return root != nullptr
               ? root
               : scope.nodes.at(std::string(StripPercent(comp.instrs.back().name->text)));
  }

  absl::StatusOr<Node*> BuildInstruction(const InstrAst& instr, Graph* graph, Scope& scope,
                                         std::vector<const CompAst*>& call_stack) {
    std::string name(StripPercent(instr.name->text));
    int line = instr.name->line;
    if (auto it = scope.line_of.find(name); it != scope.line_of.end()) {
      return SyntaxError(line, Cat("duplicate instruction name ", Quote(instr.name->text),
                                   " (first defined on line ", it->second, ")"));
    }
    scope.line_of.emplace(name, line);

    std::vector<Node*> operands;
    std::vector<const Shape*> operand_shapes;
    for (const OperandAst& operand : instr.operands) {
      auto found = scope.nodes.find(std::string(StripPercent(operand.name->text)));
      if (found == scope.nodes.end()) {
        return SyntaxError(operand.name->line,
                           Cat("unknown operand ", Quote(operand.name->text), " of %", name,
                               " (operands must be defined before use)"));
      }
      Node* node = found->second;
      if (operand.shape.has_value() && *operand.shape != node->shape()) {
        return SyntaxError(
            operand.name->line,
            Cat("operand ", Quote(operand.name->text), " of %", name, " is written as ",
                operand.shape->ToString(), " but has shape ", node->shape().ToString()));
      }
      operands.push_back(node);
      operand_shapes.push_back(&node->shape());
    }
    if (instr.is_call || instr.is_custom_call) {
      Node* result = nullptr;
      if (instr.is_call) {
        TESSEL_ASSIGN_OR_RETURN(result, InlineCall(instr, graph, operands, call_stack));
      } else {
        TESSEL_ASSIGN_OR_RETURN(result, LowerCustomCall(instr, graph, operands));
      }
      scope.nodes.emplace(name, result);
      return result;
    }

    OpAttributes attrs;
    std::string sharding;
    const AttrAst* to_apply = nullptr;
    TESSEL_RETURN_IF_ERROR(ApplyAttributes(instr, &attrs, &sharding, &to_apply));
    if (instr.opcode == Opcode::kParameter) {
      std::string_view raw = Strip(instr.raw_operands);
      if (!ToInt(raw, &attrs.parameter_number) || attrs.parameter_number < 0) {
        return SyntaxError(instr.opcode_token->line,
                           Cat("expected a parameter number in parameter(...), got ", Quote(raw)));
      }
      auto [it, inserted] = scope.parameter_numbers.emplace(attrs.parameter_number, &instr);
      if (!inserted) {
        return SyntaxError(
            line, Cat("duplicate parameter number ", attrs.parameter_number, " in ",
                      Quote(instr.name->text), " (also %", StripPercent(it->second->name->text),
                      " on line ", it->second->name->line, ")"));
      }
      if (scope.args != nullptr) {
        TESSEL_ASSIGN_OR_RETURN(Node * arg,
                                CallArgument(instr, attrs.parameter_number, *scope.args));
        scope.nodes.emplace(name, arg);
        return arg;
      }
    } else if (instr.opcode == Opcode::kConstant) {
      TESSEL_ASSIGN_OR_RETURN(Literal literal,
                              ParseConstant(instr.shape, instr.raw_operands, line));
      attrs.literal = std::make_shared<const Literal>(std::move(literal));
    } else if (instr.opcode == Opcode::kReduce || instr.opcode == Opcode::kReduceWindow) {
      if (instr.operands.size() != 2 || instr.shape.is_tuple()) {
        return InstrError(absl::StatusCode::kUnimplemented, instr,
                          Cat("variadic ", OpcodeName(instr.opcode),
                              " (more than one input, or a tuple result) is not supported"));
      }
    } else if (instr.opcode == Opcode::kSelectAndScatter) {
      const AttrAst* select = FindAttr(instr, "select");
      if (select == nullptr) {
        return InstrError(absl::StatusCode::kInvalidArgument, instr,
                          "select-and-scatter needs attribute \"select\"");
      }
      TESSEL_ASSIGN_OR_RETURN(attrs.comparison_direction, ResolveSelect(instr, *select));
    }
    if (instr.opcode == Opcode::kWhile || instr.opcode == Opcode::kConditional) {
      TESSEL_RETURN_IF_ERROR(ResolveCalledComputations(instr, &attrs, call_stack));
    }
    if (to_apply != nullptr && instr.opcode == Opcode::kSort) {
      TESSEL_ASSIGN_OR_RETURN(attrs.sort_descending, ResolveComparator(instr, *to_apply));
    } else if (to_apply != nullptr) {
      TESSEL_ASSIGN_OR_RETURN(Reduction r, ResolveToApply(instr, *to_apply));
      attrs.reduce_kind = r.kind;
      if (r.overwrite && instr.opcode != Opcode::kScatter) {
        return LineError(absl::StatusCode::kUnimplemented, to_apply->name->line,
                         Cat("to_apply computation ", Quote(tokens_[to_apply->begin].text),
                             " returns its parameter(1), which only scatter supports, not ",
                             OpcodeName(instr.opcode)));
      }
      attrs.scatter_overwrite = r.overwrite;
      if (!operands.empty() && !operands[0]->shape().is_tuple() &&
          operands[0]->shape().dtype() != r.dtype) {
        return InstrError(
            absl::StatusCode::kInvalidArgument, instr,
            Cat("to_apply ", Quote(tokens_[to_apply->begin].text), " computes ", DTypeName(r.dtype),
                " but the operand is ", operands[0]->shape().ToString()));
      }
    }

    absl::StatusOr<Shape> inferred = InferShape(instr.opcode, operand_shapes, attrs, instr.shape);
    if (!inferred.ok()) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr, Sv(inferred.status().message()));
    }
    // Graph::AddNodeUnchecked makes names unique, so an inlined computation's instruction
    // names may come out suffixed; lookups go through the scope, never by graph name.
    Node* node = graph->AddNodeUnchecked(instr.opcode, instr.shape, std::move(operands),
                                         std::move(attrs), name);
    node->set_sharding(std::move(sharding));
    scope.nodes.emplace(name, node);
    return node;
  }

  // The computations a while (condition=, body=) or conditional (true_computation= and
  // false_computation=, or branch_computations={...}) calls, each built once into a graph of its
  // own (shared by every instruction that calls it) and verified. A while also reads XLA's
  // backend_config={"known_trip_count":{"n":"N"}}.
  absl::Status ResolveCalledComputations(const InstrAst& instr, OpAttributes* attrs,
                                         std::vector<const CompAst*>& call_stack) {
    std::vector<const AttrAst*> names;
    auto require = [&](std::string_view name) -> absl::Status {
      const AttrAst* attr = FindAttr(instr, name);
      if (attr == nullptr) {
        return InstrError(absl::StatusCode::kInvalidArgument, instr,
                          Cat(OpcodeName(instr.opcode), " needs attribute ", Quote(name)));
      }
      names.push_back(attr);
      return absl::OkStatus();
    };
    std::vector<std::string_view> words;
    if (instr.opcode == Opcode::kWhile) {
      TESSEL_RETURN_IF_ERROR(require("condition"));
      TESSEL_RETURN_IF_ERROR(require("body"));
      if (const AttrAst* config = FindAttr(instr, "backend_config")) {
        TESSEL_ASSIGN_OR_RETURN(attrs->known_trip_count, KnownTripCount(*config));
      }
    } else if (const AttrAst* list = FindAttr(instr, "branch_computations")) {
      ValueReader r(*this, *list);
      TESSEL_RETURN_IF_ERROR(r.Expect("{"));
      while (!r.Consume("}")) {
        if (r.AtEnd() || r.Peek().kind != TokenKind::kWord) {
          return r.Error("expected {%comp0, %comp1, ...}");
        }
        words.push_back(r.Peek().text);
        r.Skip();
        r.Consume(",");
      }
      TESSEL_RETURN_IF_ERROR(r.ExpectEnd());
    } else {
      TESSEL_RETURN_IF_ERROR(require("true_computation"));
      TESSEL_RETURN_IF_ERROR(require("false_computation"));
    }
    for (const AttrAst* attr : names) {
      TESSEL_ASSIGN_OR_RETURN(std::string_view word, AttrWord(*attr));
      words.push_back(word);
    }
    for (std::string_view word : words) {
      TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> comp,
                              CalledComputation(instr, word, call_stack));
      attrs->called_computations.push_back(std::move(comp));
    }
    return absl::OkStatus();
  }

  // backend_config={"known_trip_count":{"n":"4"},...} (or the same JSON as a quoted string):
  // N, or -1 when the config has no known_trip_count.
  absl::StatusOr<int64_t> KnownTripCount(const AttrAst& attr) const {
    std::string_view text = AttrValueText(attr);
    size_t key = text.find("known_trip_count");
    if (key == std::string_view::npos) return int64_t{-1};
    size_t n = text.find("\"n\"", key);
    if (n == std::string_view::npos) return MalformedAttr(attr, "known_trip_count has no \"n\"");
    size_t begin = text.find_first_of("0123456789", n);
    size_t end =
        begin == std::string_view::npos ? begin : text.find_first_not_of("0123456789", begin);
    int64_t count = -1;
    if (begin == std::string_view::npos || !ToInt(text.substr(begin, end - begin), &count)) {
      return MalformedAttr(attr, "known_trip_count.n is not an integer");
    }
    // The digits' scan skips a sign: "-5" must not read as 5.
    if (text.substr(n, begin - n).find('-') != std::string_view::npos) {
      return MalformedAttr(attr, "known_trip_count.n is negative");
    }
    return count;
  }

  // The graph of computation `word`, built on first use.
  absl::StatusOr<std::shared_ptr<const Graph>> CalledComputation(
      const InstrAst& instr, std::string_view word, std::vector<const CompAst*>& call_stack) {
    std::string name(StripPercent(word));
    auto it = comp_by_name_.find(name);
    if (it == comp_by_name_.end() || comps_[it->second].is_entry) {
      return InstrError(
          absl::StatusCode::kInvalidArgument, instr,
          Cat("unknown computation ", Quote(word), " called by ", OpcodeName(instr.opcode)));
    }
    if (auto built = called_.find(name); built != called_.end()) return built->second;
    const CompAst& callee = comps_[it->second];
    for (const CompAst* active : call_stack) {
      if (active == &callee) {
        return InstrError(absl::StatusCode::kInvalidArgument, instr,
                          Cat("recursive call: %", name,
                              " is already being called (HLO computations cannot recurse)"));
      }
    }
    auto graph = std::make_shared<Graph>(name);
    call_stack.push_back(&callee);
    absl::StatusOr<Node*> root = BuildComputation(callee, graph.get(), nullptr, call_stack);
    call_stack.pop_back();
    if (!root.ok()) return root.status();
    graph->set_root(*root);
    absl::Status status = Verify(*graph);
    if (!status.ok()) {
      return SyntaxError(callee.name->line,
                         Cat("in computation %", name, ": ", Sv(status.message())));
    }
    called_.emplace(name, graph);
    return std::shared_ptr<const Graph>(std::move(graph));
  }

  // parameter(number) of an inlined computation: the call's operand `number`, which must have
  // the parameter's shape.
  absl::StatusOr<Node*> CallArgument(const InstrAst& instr, int64_t number,
                                     const std::vector<Node*>& args) const {
    if (number >= static_cast<int64_t>(args.size())) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr,
                        Cat("parameter(", number,
                            ") of a called computation, but the call "
                            "passes ",
                            args.size(), " operand(s)"));
    }
    if (args[number]->shape() != instr.shape) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr,
                        Cat("parameter(", number, ") has shape ", instr.shape.ToString(),
                            " but the call passes ", args[number]->shape().ToString()));
    }
    return args[number];
  }

  // The attribute `name` of `instr`, or null (for the instructions ApplyAttributes does not see).
  static const AttrAst* FindAttr(const InstrAst& instr, std::string_view name) {
    for (const AttrAst& attr : instr.attrs) {
      if (attr.name->text == name) return &attr;
    }
    return nullptr;
  }

  // `custom-call`: the targets that annotate shardings or bound a manual region are lowered; any
  // other target is kUnimplemented, naming it.
  // - "Sharding" (jax.lax.with_sharding_constraint, torch_xla's mark_sharding on an
  //   intermediate): a copy of the operand carrying the instruction's `sharding`, which is how
  //   XLA's ShardingPropagation reads it.
  // - "xla.sdy.FuncResultSharding" (Shardy's marker of a function result's sharding): the operand
  //   itself. JAX also writes the same sharding in HLO form on the entry's root, which is what
  //   Tessel reads; the Shardy attribute is ignored like every other `xla.sdy.*` attribute.
  // - "SPMDFullToShardShape" / "SPMDShardToFullShape" (a GSPMD shard_map): a kCustomCall node.
  // - "xla.sdy.GlobalToLocalShape" / "xla.sdy.LocalToGlobalShape" (a Shardy shard_map): lowered to
  //   the GSPMD form, LowerSdyManualBoundary.
  absl::StatusOr<Node*> LowerCustomCall(const InstrAst& instr, Graph* graph,
                                        const std::vector<Node*>& operands) const {
    const AttrAst* target = FindAttr(instr, "custom_call_target");
    const AttrAst* sharding = FindAttr(instr, "sharding");
    if (target == nullptr) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr,
                        "custom-call needs attribute \"custom_call_target\"");
    }
    if (target->end - target->begin != 1 || tokens_[target->begin].kind != TokenKind::kString) {
      return MalformedAttr(*target, "expected a quoted target name");
    }
    const std::string_view quoted = tokens_[target->begin].text;
    const std::string_view name = quoted.substr(1, quoted.size() - 2);
    if (name == "xla.sdy.GlobalToLocalShape" || name == "xla.sdy.LocalToGlobalShape") {
      return LowerSdyManualBoundary(instr, graph, operands, name == "xla.sdy.GlobalToLocalShape");
    }
    const bool boundary = name == kFullToShardShapeTarget || name == kShardToFullShapeTarget;
    const bool annotation = name == "Sharding" || name == "xla.sdy.FuncResultSharding";
    if (!annotation && !boundary) {
      return InstrError(absl::StatusCode::kUnimplemented, instr,
                        Cat("custom-call target ", quoted,
                            " is not supported (supported: \"Sharding\", "
                            "\"xla.sdy.FuncResultSharding\", \"SPMDFullToShardShape\", "
                            "\"SPMDShardToFullShape\", \"xla.sdy.GlobalToLocalShape\", "
                            "\"xla.sdy.LocalToGlobalShape\")"));
    }
    if (boundary) {
      std::string text = sharding != nullptr ? std::string(AttrValueText(*sharding)) : "";
      if (name == kFullToShardShapeTarget && text.empty()) text = "{manual}";
      if (text.empty()) {
        return InstrError(absl::StatusCode::kInvalidArgument, instr,
                          "custom-call \"SPMDShardToFullShape\" needs a sharding={...} (the "
                          "layout of the global result)");
      }
      return AddManualBoundary(instr, graph, operands, std::string(name), instr.shape,
                               std::string(StripPercent(instr.name->text)), std::move(text));
    }
    if (operands.size() != 1 || operands[0]->shape() != instr.shape) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr,
                        Cat("custom-call ", quoted, " takes one operand of the result's shape ",
                            instr.shape.ToString()));
    }
    if (name == "xla.sdy.FuncResultSharding") return operands[0];
    if (sharding == nullptr || sharding->begin == sharding->end) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr,
                        "custom-call \"Sharding\" needs a sharding={...}");
    }
    Node* copy = graph->AddNodeUnchecked(Opcode::kCopy, instr.shape, {operands[0]}, OpAttributes(),
                                         std::string(StripPercent(instr.name->text)));
    copy->set_sharding(std::string(AttrValueText(*sharding)));
    return copy;
  }

  // One SPMDFullToShardShape / SPMDShardToFullShape node of `shape` on `operands` (exactly one).
  absl::StatusOr<Node*> AddManualBoundary(const InstrAst& instr, Graph* graph,
                                          const std::vector<Node*>& operands, std::string target,
                                          const Shape& shape, std::string name,
                                          std::string sharding) const {
    if (operands.size() != 1) {
      return InstrError(
          absl::StatusCode::kInvalidArgument, instr,
          Cat("custom-call \"", target, "\" takes one operand, got ", operands.size()));
    }
    OpAttributes attrs;
    attrs.custom_call_target = std::move(target);
    const Shape* operand_shape = &operands[0]->shape();
    absl::StatusOr<Shape> inferred =
        InferShape(Opcode::kCustomCall, {&operand_shape, 1}, attrs, shape);
    if (!inferred.ok()) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr, Sv(inferred.status().message()));
    }
    Node* node = graph->AddNodeUnchecked(Opcode::kCustomCall, shape, {operands[0]},
                                         std::move(attrs), std::move(name));
    node->set_sharding(std::move(sharding));
    return node;
  }

  // Shardy's shard_map boundary: "xla.sdy.GlobalToLocalShape" (global operands -> a tuple of
  // local values; xla.sdy.in_shardings) or "xla.sdy.LocalToGlobalShape" (local operands -> a
  // tuple of global values; xla.sdy.out_shardings), over the mesh axes of xla.sdy.manual_axes.
  // Lowered as XLA's Shardy export does (shard_map_export.cc): each global operand becomes a copy
  // carrying its sharding (the "Sharding" custom-call) and an SPMDFullToShardShape; each local
  // operand an SPMDShardToFullShape carrying its sharding; several values make a tuple.
  absl::StatusOr<Node*> LowerSdyManualBoundary(const InstrAst& instr, Graph* graph,
                                               const std::vector<Node*>& operands,
                                               bool to_local) const {
    const std::string_view target =
        to_local ? "xla.sdy.GlobalToLocalShape" : "xla.sdy.LocalToGlobalShape";
    auto fail = [&](absl::StatusCode code, std::string_view why) {
      return InstrError(code, instr, Cat("custom-call \"", target, "\": ", why));
    };
    const AttrAst* frontend = FindAttr(instr, "frontend_attributes");
    if (frontend == nullptr) {
      return fail(absl::StatusCode::kInvalidArgument,
                  "needs frontend_attributes with its shardings");
    }
    const std::string_view attributes = AttrValueText(*frontend);
    absl::StatusOr<std::string> meshes_text =
        internal::FindFrontendAttribute(module_frontend_attributes_, "xla.sdy.meshes");
    if (!meshes_text.ok()) {
      return fail(absl::StatusCode::kInvalidArgument,
                  "the module header has no frontend_attributes={xla.sdy.meshes=...}");
    }
    absl::StatusOr<internal::SdyMeshes> meshes = internal::ParseSdyMeshes(*meshes_text);
    if (!meshes.ok()) return fail(meshes.status().code(), Sv(meshes.status().message()));
    const std::string key = to_local ? "xla.sdy.in_shardings" : "xla.sdy.out_shardings";
    absl::StatusOr<std::string> per_value = internal::FindFrontendAttribute(attributes, key);
    if (!per_value.ok()) {
      return fail(absl::StatusCode::kInvalidArgument, Cat("needs frontend attribute ", key));
    }
    absl::StatusOr<std::vector<std::string>> shardings =
        internal::SdyShardingsToHlo(*per_value, *meshes);
    if (!shardings.ok()) return fail(shardings.status().code(), Sv(shardings.status().message()));
    TESSEL_RETURN_IF_ERROR(CheckAllAxesManual(instr, attributes, *meshes, fail));
    const std::vector<Shape> results =
        instr.shape.is_tuple() ? instr.shape.tuple_shapes() : std::vector<Shape>{instr.shape};
    if (shardings->size() != operands.size() || results.size() != operands.size()) {
      return fail(absl::StatusCode::kInvalidArgument,
                  Cat(operands.size(), " operand(s), ", results.size(), " result(s) and ",
                      shardings->size(), " sharding(s) in ", key, " must agree"));
    }
    const std::string base(StripPercent(instr.name->text));
    std::vector<Node*> values;
    for (size_t i = 0; i < operands.size(); ++i) {
      const std::string suffix = operands.size() == 1 ? "" : Cat(".", i);
      std::string boundary_target(to_local ? kFullToShardShapeTarget : kShardToFullShapeTarget);
      if (to_local) {
        Node* annotated =
            graph->AddNodeUnchecked(Opcode::kCopy, operands[i]->shape(), {operands[i]},
                                    OpAttributes(), Cat(base, ".sharding", suffix));
        annotated->set_sharding((*shardings)[i]);
        TESSEL_ASSIGN_OR_RETURN(
            Node * local, AddManualBoundary(instr, graph, {annotated}, boundary_target, results[i],
                                            Cat(base, suffix), "{manual}"));
        values.push_back(local);
      } else {
        TESSEL_ASSIGN_OR_RETURN(Node * global,
                                AddManualBoundary(instr, graph, {operands[i]}, boundary_target,
                                                  results[i], Cat(base, suffix), (*shardings)[i]));
        values.push_back(global);
      }
    }
    if (!instr.shape.is_tuple()) return values[0];
    return graph->AddNodeUnchecked(Opcode::kTuple, instr.shape, std::move(values), OpAttributes(),
                                   Cat(base, ".tuple"));
  }

  // Tessel supports full manual regions only: every axis of the mesh in xla.sdy.manual_axes
  // (XLA's subgroup-manual shardings, `last_tile_dims={manual}`, have no partitioning rule here).
  template <typename Fail>
  absl::Status CheckAllAxesManual(const InstrAst& instr, std::string_view attributes,
                                  const internal::SdyMeshes& meshes, const Fail& fail) const {
    absl::StatusOr<std::string> text =
        internal::FindFrontendAttribute(attributes, "xla.sdy.manual_axes");
    if (!text.ok()) {
      return fail(absl::StatusCode::kInvalidArgument,
                  "needs frontend attribute xla.sdy.manual_axes");
    }
    absl::StatusOr<std::vector<std::string>> manual = internal::ParseSdyManualAxes(*text);
    if (!manual.ok()) return fail(manual.status().code(), Sv(manual.status().message()));
    for (const auto& [mesh_name, mesh] : meshes) {
      for (const auto& [axis, size] : mesh) {
        if (size > 1 && std::find(manual->begin(), manual->end(), axis) == manual->end()) {
          return fail(absl::StatusCode::kUnimplemented,
                      Cat("mesh axis \"", axis, "\" of @", mesh_name,
                          " is not manual; a shard_map over some of the mesh axes (subgroup "
                          "manual sharding) is not supported"));
        }
      }
    }
    return absl::OkStatus();
  }

  // `call(operands), to_apply=%comp`: the callee's instructions are added in place of the call
  // (XLA's CallInliner), so the partitioner sees one flat graph and partitions the callee once
  // per call site with the shardings it meets there. A sharding on the call applies to the
  // callee's result.
  absl::StatusOr<Node*> InlineCall(const InstrAst& instr, Graph* graph,
                                   const std::vector<Node*>& operands,
                                   std::vector<const CompAst*>& call_stack) {
    const AttrAst* to_apply = FindAttr(instr, "to_apply");
    const AttrAst* sharding = FindAttr(instr, "sharding");
    if (to_apply == nullptr) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr,
                        "call needs attribute \"to_apply\"");
    }
    TESSEL_ASSIGN_OR_RETURN(std::string_view word, AttrWord(*to_apply));
    auto it = comp_by_name_.find(std::string(StripPercent(word)));
    if (it == comp_by_name_.end() || comps_[it->second].is_entry) {
      return SyntaxError(to_apply->name->line,
                         Cat("unknown computation ", Quote(word), " in to_apply of %",
                             StripPercent(instr.name->text)));
    }
    const CompAst& callee = comps_[it->second];
    for (const CompAst* active : call_stack) {
      if (active == &callee) {
        return InstrError(absl::StatusCode::kInvalidArgument, instr,
                          Cat("recursive call: %", StripPercent(word),
                              " is already being called (HLO computations cannot recurse)"));
      }
    }
    call_stack.push_back(&callee);
    absl::StatusOr<Node*> result = BuildComputation(callee, graph, &operands, call_stack);
    call_stack.pop_back();
    if (!result.ok()) return result.status();
    if ((*result)->shape() != instr.shape) {
      return InstrError(absl::StatusCode::kInvalidArgument, instr,
                        Cat("the call's shape ", instr.shape.ToString(),
                            " differs from the root "
                            "of %",
                            StripPercent(word), ", ", (*result)->shape().ToString()));
    }
    if (sharding == nullptr) return *result;
    if (sharding->begin == sharding->end) return MalformedAttr(*sharding, "expected {...}");
    if (instr.shape.is_tuple()) {
      return InstrError(absl::StatusCode::kUnimplemented, instr,
                        "a sharding on a call with a tuple result is not supported; put the "
                        "shardings on the callee's instructions");
    }
    // The callee's root may be one of the call's own operands (or carry a sharding of its own):
    // a copy keeps the call's sharding on the call's value alone.
    Node* copy = graph->AddNodeUnchecked(Opcode::kCopy, instr.shape, {*result}, OpAttributes(),
                                         std::string(StripPercent(instr.name->text)));
    copy->set_sharding(std::string(AttrValueText(*sharding)));
    return copy;
  }

  std::string_view text_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::string module_name_;
  std::string_view module_frontend_attributes_;
  int module_frontend_attributes_line_ = 0;
  std::vector<CompAst> comps_;
  absl::flat_hash_map<std::string, size_t> comp_by_name_;
  absl::flat_hash_map<std::string, Reduction> reductions_;
  // Computations called by while / conditional, by name, once built.
  absl::flat_hash_map<std::string, std::shared_ptr<const Graph>> called_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ParseHloModule(std::string_view text) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(text));
  Parser parser(text, std::move(tokens));
  return parser.Parse();
}

}  // namespace tessel
