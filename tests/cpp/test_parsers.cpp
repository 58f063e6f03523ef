// The data parsers (data/jsonl.h, data/csv.h, data/idx.h): numbers as the nearest double to their
// text, strings with every escape and quoting rule, and malformed input as the core's typed errors
// naming the line, never a crash. Inputs large enough to be cut into ranges check that the ranges
// are stitched in file order and that line numbers count from the start of the file.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "check.h"
#include "threads.h"
#include "data/csv.h"
#include "data/float_parse.h"
#include "data/idx.h"
#include "data/jsonl.h"

using namespace nexus;
using test::Threads;
using namespace nexus::data;

namespace {

Table jsonl(const std::string& text, ReadOptions opt = {}) { return parse_jsonl(text.data(), text.size(), opt); }
Table csv(const std::string& text, CsvOptions c = {}, ReadOptions opt = {}) {
  return parse_csv(text.data(), text.size(), opt, c);
}

const Column& col(const Table& t, const std::string& name) {
  for (const Column& c : t.columns)
    if (c.name == name) return c;
  throw std::runtime_error("no column " + name);
}
template <class T> std::vector<T> values(const Column& c) {
  const T* p = reinterpret_cast<const T*>(c.values.data.get());
  return std::vector<T>(p, p + c.rows * std::max<int64_t>(c.width, 1));
}
std::vector<std::string> strings(const Column& c) {
  std::vector<std::string> out;
  for (int64_t r = 0; r < c.rows; ++r)
    out.push_back(c.chars.substr(size_t(c.offsets[r]), size_t(c.offsets[r + 1] - c.offsets[r])));
  return out;
}

}  // namespace

// ---- numbers --------------------------------------------------------------------------------

TEST(float_parser_gives_strtods_double_for_random_and_edge_texts) {
  // strtod (glibc) rounds correctly: ours must agree bit for bit, through each of its paths
  // (exact, Eisel-Lemire, strtod behind it) and on every machine the tests run on.
  std::vector<std::string> texts = {"0",
                                    "-0",
                                    "0.0",
                                    "1",
                                    "0.1",
                                    "0.30000000000000004",
                                    "1e22",
                                    "1e23",
                                    "9007199254740993",
                                    "9007199254740993.00000000000000000001",
                                    "2.2250738585072011e-308",
                                    "4.9406564584124654e-324",
                                    "2.4703282292062328e-324",
                                    "1.7976931348623157e308",
                                    "1.7976931348623159e308",
                                    "1e400",
                                    "1e-400",
                                    "123456789012345678901234567890",
                                    "0.000000000000000000000000001234",
                                    "5.",
                                    ".5"};
  uint64_t state = 12345;
  const auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int i = 0; i < 20000; ++i) {
    std::string t = (next() >> 63) ? "-" : "";
    const int digits = 1 + int(next() >> 59);  // 1..32
    for (int k = 0; k < digits; ++k) t += char('0' + (next() >> 33) % 10);
    if (next() >> 63) t.insert(t.size() - size_t(1 + (next() >> 33) % size_t(digits)), ".");
    t += "e" + std::to_string(int((next() >> 33) % 700) - 350);
    texts.push_back(t);
  }
  // 10 to 16 digits with a small exponent: exact doubles on both sides, which Eisel-Lemire (not
  // the exact division, kept for mantissas below 2^32) rounds; halfway cases among them.
  for (int i = 0; i < 20000; ++i) {
    const int digits = 10 + int((next() >> 33) % 7);
    std::string t;
    for (int k = 0; k < digits; ++k) t += char('0' + (k == 0 ? 1 + (next() >> 33) % 9 : (next() >> 33) % 10));
    texts.push_back(t + "e" + std::to_string(int((next() >> 33) % 45) - 22));
  }
  for (const char* t : {"4503599627370497.5", "9007199254740991", "9007199254740992.5", "1234567890123456e-22",
                        "8.98846567431158e307", "0.1000000000000000055511151231257827"})
    texts.push_back(t);
  for (const std::string& t : texts) {
    double got = 0;
    CHECK_MSG(data::parse_double(t.data(), t.data() + t.size(), got), t);
    const double want = std::strtod(t.c_str(), nullptr);
    CHECK_MSG(test::same(got, want), t << ": " << test::show(got) << " vs " << test::show(want));
  }
  for (const char* bad : {"", "-", ".", "e5", "1e", "1.2.3", "--1", "1x", "0x10", "inf", "nan"}) {
    double got = 0;
    CHECK_MSG(!data::parse_double(bad, bad + std::strlen(bad), got), bad);
  }
  double got = 0;  // JSON's grammar: no bare point
  CHECK(!data::parse_double("5.", "5." + 2, got, /*bare_point=*/false));
  CHECK(!data::parse_double(".5", ".5" + 2, got, /*bare_point=*/false));
}

// ---- JSONL ----------------------------------------------------------------------------------

TEST(jsonl_integers_stay_exact_and_wider_ones_become_doubles) {
  Table t = jsonl(
      "{\"i\": 1, \"neg\": -0}\n{\"i\": -9223372036854775808, \"neg\": 0}\n{\"i\": 9223372036854775807, \"neg\": 7}\n");
  CHECK(col(t, "i").dtype == DType::Int64);
  CHECK(values<int64_t>(col(t, "i")) == (std::vector<int64_t>{1, INT64_MIN, INT64_MAX}));
  CHECK(values<int64_t>(col(t, "neg")) == (std::vector<int64_t>{0, 0, 7}));  // -0 is the integer 0
  // one past int64: the nearest double (2^63), and the column becomes float64
  Table big = jsonl("{\"b\": 1}\n{\"b\": 9223372036854775808}\n{\"b\": -92233720368547758090}\n");
  CHECK(col(big, "b").dtype == DType::Float64);
  std::vector<double> b = values<double>(col(big, "b"));
  CHECK_EQ(b[0], 1.0);
  CHECK_EQ(b[1], 0x1p63);
  CHECK_EQ(b[2], -92233720368547758090.0);
}

TEST(jsonl_floats_are_the_nearest_double_to_their_text) {
  const std::string text =
      "{\"x\": 0.1}\n{\"x\": -0.0}\n{\"x\": 1e3}\n{\"x\": -2.5E-3}\n{\"x\": 1.7976931348623157e308}\n"
      "{\"x\": 4.9406564584124654e-324}\n{\"x\": 1e400}\n{\"x\": -1e400}\n{\"x\": 1e-400}\n{\"x\": 2}\n"
      "{\"x\": 0.30000000000000004}\n{\"x\": NaN}\n{\"x\": -Infinity}\n{\"x\": 123456789012345678}\n";
  Table t = jsonl(text);
  CHECK(col(t, "x").dtype == DType::Float64);
  std::vector<double> x = values<double>(col(t, "x"));
  const std::vector<double> want = {0.1,
                                    -0.0,
                                    1000.0,
                                    -2.5e-3,
                                    1.7976931348623157e308,
                                    4.9406564584124654e-324,
                                    HUGE_VAL,
                                    -HUGE_VAL,
                                    0.0,
                                    2.0,
                                    0.30000000000000004,
                                    std::numeric_limits<double>::quiet_NaN(),
                                    -HUGE_VAL,
                                    123456789012345678.0};
  CHECK_EQ(x.size(), want.size());
  for (size_t i = 0; i < std::min(x.size(), want.size()); ++i)
    CHECK_MSG(test::same(x[i], want[i]), "row " << i << ": " << test::show(x[i]) << " vs " << test::show(want[i]));
  // integers met first, then a float: the column is float64 and the integers exact
  Table m = jsonl("{\"m\": 9007199254740993}\n{\"m\": 0.5}\n");
  CHECK_EQ(values<double>(col(m, "m"))[0], 9007199254740992.0);  // nearest double of 2^53 + 1
}

TEST(jsonl_strings_decode_every_escape) {
  Table t = jsonl(
      "{\"s\": \"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"}\n"
      "{\"s\": \"\\u00e9\\u20AC\"}\n"
      "{\"s\": \"\\ud83d\\ude00\"}\n"
      "{\"s\": \"\\ud800x\"}\n"
      "{\"s\": \"caf\xc3\xa9 \xe2\x82\xac\"}\n"
      "{\"s\": \"\"}\n");
  std::vector<std::string> s = strings(col(t, "s"));
  CHECK_EQ(s.size(), 6u);
  CHECK_EQ(s[0], std::string("a\"b\\c/d\b\f\n\r\t"));
  CHECK_EQ(s[1], std::string("\xc3\xa9\xe2\x82\xac"));
  CHECK_EQ(s[2], std::string("\xf0\x9f\x98\x80"));  // a surrogate pair is one code point
  CHECK_EQ(s[3], std::string("\xed\xa0\x80x"));     // a lone surrogate, as Python's surrogatepass
  CHECK_EQ(s[4], std::string("caf\xc3\xa9 \xe2\x82\xac"));
  CHECK_EQ(s[5], std::string());
  CHECK(col(t, "s").valid.empty());  // every row has a value
  // keys decode the same way
  Table k = jsonl("{\"\\u0061b\": 1}\n");
  CHECK_EQ(k.columns.size(), 1u);
  CHECK_EQ(k.columns[0].name, std::string("ab"));
}

TEST(jsonl_rows_missing_values_and_lists) {
  Table t =
      jsonl("\xef\xbb\xbf{\"a\": 1, \"s\": \"x\"}\r\n\n{\"b\": true}\n{\"a\": null, \"a\": 3, \"v\": [1, 2.5]}\n");
  CHECK_EQ(t.stats.rows, 3);
  CHECK_EQ(t.stats.lines, 4);  // the blank line counts as a line, not a row
  // a column with missing rows is float64 with NaN there; a repeated key keeps its last value
  CHECK(col(t, "a").dtype == DType::Float64);
  std::vector<double> a = values<double>(col(t, "a"));
  CHECK(a.size() == 3 && a[0] == 1.0 && std::isnan(a[1]) && a[2] == 3.0);
  CHECK(col(t, "s").valid == (std::vector<uint8_t>{1, 0, 0}));
  CHECK_EQ(col(t, "v").width, 2);
  std::vector<double> v = values<double>(col(t, "v"));
  CHECK(v.size() == 6 && std::isnan(v[0]) && v[4] == 1.0 && v[5] == 2.5);
}

TEST(jsonl_malformed_lines_are_value_errors_naming_the_line) {
  struct Bad {
    const char* line;
    const char* says;
  };
  // each on a column of its own ("k"), so that no line before it has fixed the column's kind
  const Bad bad[] = {
      {"[1, 2]", "expected '{'"},
      {"{\"k\" 1}", "expected ':' after the key"},
      {"{\"k\": }", "expected a value"},
      {"{\"k\": 1,}", "to start a key"},
      {"{\"k\": 1", "',' or '}'"},
      {"{\"k\": 1} x", "end of the line"},
      {"{\"k\": tru}", "expected a value"},
      {"{\"k\": -}", "expected a value"},
      {"{\"k\": 1e}", "expected a digit in the number's exponent"},
      {"{\"k\": 01}", "leading zero"},
      {"{\"k\": 2.}", "expected a digit after the decimal point"},
      {"{\"k\": \"x}", "unterminated string"},
      {"{\"k\": \"\\q\"}", "invalid escape"},
      {"{\"k\": \"\\u12G4\"}", "four hex digits"},
      {"{\"k\": \"\x01\"}", "control character"},
      {"{\"k\": \"\xff\"}", "invalid UTF-8"},
      {"{\"k\": \"\xc0\xaf\"}", "invalid UTF-8"},  // an overlong '/'
      {"{\"k\": {\"b\": 1}}", "nested object"},
      {"{\"k\": [1, [2]]}", "expected a number in the list"},
      {"{\"a\": \"x\"}", "holds integers in earlier lines but this line has strings"},
  };
  for (const Bad& b : bad) {
    const std::string text = "{\"a\": 0}\n{\"a\": 5}\n" + std::string(b.line) + "\n{\"a\": 1}\n";
    std::string got = "no error";
    try {
      jsonl(text);
    } catch (const ValueError& e) {
      got = e.what();
    }
    CHECK_MSG(got.find("line 3, byte ") == 0 && got.find(b.says) != std::string::npos, b.line << " -> " << got);
  }
}

TEST(jsonl_skip_mode_drops_bad_lines_but_not_type_conflicts) {
  ReadOptions skip;
  skip.skip_errors = true;
  Table t = jsonl("{\"a\": 1}\n{\"a\": }\n{\"a\": 2}\nnot json\n{\"a\": 3}\n", skip);
  CHECK(values<int64_t>(col(t, "a")) == (std::vector<int64_t>{1, 2, 3}));
  CHECK_EQ(t.stats.skipped, 2);
  CHECK(t.stats.skipped_lines == (std::vector<int64_t>{2, 4}));
  CHECK_THROWS(jsonl("{\"a\": 1}\n{\"a\": \"x\"}\n", skip), ValueError, "holds integers in earlier lines");
  CHECK_THROWS(jsonl("{\"a\": [1, 2]}\n{\"a\": [1]}\n", skip), ValueError, "lists of length 2");
  ReadOptions pin;
  pin.dtypes = {{"a", "int32"}};
  CHECK_THROWS(jsonl("{\"a\": 1}\n{\"a\": 3000000000}\n", pin), ValueError, "does not fit in int32");
  CHECK_THROWS(jsonl("{\"a\": 1.5}\n", pin), ValueError, "is not an integer");
  ReadOptions want;
  want.columns = {"zz"};
  CHECK_THROWS(jsonl("{\"a\": 1}\n", want), ValueError, "'zz' was asked for but no line has it");
}

TEST(jsonl_ranges_stitch_in_order_and_count_lines_from_the_file_start) {
  Threads threads(3);
  std::string text;
  const int rows = 30000;  // ~0.9 MB: several ranges
  for (int i = 0; i < rows; ++i) text += "{\"i\": " + std::to_string(i) + ", \"x\": " + std::to_string(i) + ".5}\n";
  Table t = jsonl(text);
  std::vector<int64_t> i = values<int64_t>(col(t, "i"));
  std::vector<double> x = values<double>(col(t, "x"));
  int64_t wrong = 0;
  for (int r = 0; r < rows; ++r) wrong += i[size_t(r)] != r || x[size_t(r)] != r + 0.5;
  CHECK_EQ(wrong, 0);
  CHECK_EQ(t.stats.rows, rows);
  // a bad line near the end (in the last range) is reported with its line in the file
  std::string bad = text + "{\"i\": oops}\n";
  CHECK_THROWS(jsonl(bad), ValueError, "line 30001, byte ");
}

// ---- CSV ------------------------------------------------------------------------------------

TEST(csv_infers_numbers_booleans_and_missing_values) {
  Table t = csv("i,f,b,s,m\n1,0.1,true,x,1.5\n-2,-0.0,False,y,NA\n+3,1e3,TRUE,z,\n");
  CHECK(col(t, "i").dtype == DType::Int64);
  CHECK(values<int64_t>(col(t, "i")) == (std::vector<int64_t>{1, -2, 3}));
  CHECK(col(t, "f").dtype == DType::Float64);
  std::vector<double> f = values<double>(col(t, "f"));
  CHECK(test::same(f[0], 0.1) && test::same(f[1], -0.0) && f[2] == 1000.0);
  CHECK(col(t, "b").dtype == DType::Bool);
  CHECK(values<bool>(col(t, "b")) == (std::vector<bool>{true, false, true}));
  CHECK(strings(col(t, "s")) == (std::vector<std::string>{"x", "y", "z"}));
  std::vector<double> m = values<double>(col(t, "m"));
  CHECK(m[0] == 1.5 && std::isnan(m[1]) && std::isnan(m[2]));
  // a column mixing numbers and text is read again as strings, keeping the original text
  Table mixed = csv("a\n1\n2.50\nx\n-0\n");
  CHECK(col(mixed, "a").dtype == DType::String);
  CHECK(strings(col(mixed, "a")) == (std::vector<std::string>{"1", "2.50", "x", "-0"}));
}

TEST(csv_quoted_fields_hold_delimiters_quotes_and_newlines) {
  Table t = csv("name,n\n\"a,b\",1\n\"he said \"\"hi\"\"\",2\n\"two\nlines\",3\n\"\",4\n\"12\",5\r\nlast,6\r\n");
  CHECK(strings(col(t, "name")) == (std::vector<std::string>{"a,b", "he said \"hi\"", "two\nlines", "", "12", "last"}));
  CHECK(col(t, "name").valid == (std::vector<uint8_t>{1, 1, 1, 0, 1, 1}));  // "" is missing
  CHECK(values<int64_t>(col(t, "n")) == (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  CHECK_EQ(t.stats.lines, 8);  // the quoted newline is a line of the file
  CsvOptions semi;
  semi.delimiter = ';';
  semi.quote = '\'';
  Table s = csv("a;b\n'x;y';'it''s'\n", semi);
  CHECK(strings(col(s, "a")) == (std::vector<std::string>{"x;y"}));
  CHECK(strings(col(s, "b")) == (std::vector<std::string>{"it's"}));
  CsvOptions same;
  same.delimiter = same.quote = '"';
  CHECK_THROWS(csv("a\n1\n", same), ValueError, "must differ");
}

TEST(csv_a_sign_followed_by_another_is_text) {
  Table t = csv("a\n+-1\n+-2.5\n");
  CHECK(col(t, "a").dtype == DType::String);
}

TEST(csv_header_names_and_column_selection) {
  CsvOptions none;
  none.header = false;
  Table t = csv("1,2\n3,4\n", none);
  CHECK_EQ(t.columns.size(), 2u);
  CHECK_EQ(t.columns[1].name, std::string("column_1"));
  CHECK(values<int64_t>(col(t, "column_0")) == (std::vector<int64_t>{1, 3}));
  CHECK_THROWS(csv("a,a\n1,2\n"), ValueError, "names column 'a' twice");
  ReadOptions pick;
  pick.columns = {"c", "a"};
  Table p = csv("a,b,c\n1,x,2.5\n", {}, pick);
  CHECK_EQ(p.columns.size(), 2u);
  CHECK_EQ(p.columns[0].name, std::string("c"));
  pick.columns = {"d"};
  CHECK_THROWS(csv("a,b,c\n1,x,2.5\n", {}, pick), ValueError, "column 'd' is not in the header");
}

TEST(csv_malformed_records_are_value_errors_naming_the_line) {
  struct Bad {
    const char* record;
    const char* says;
  };
  const Bad bad[] = {
      {"1,2,3", "expected 2 fields, got 3"}, {"1", "expected 2 fields, got 1"}, {"\"1,2", "unterminated quoted field"},
      {"\"1\"x,2", "after a closing quote"}, {"1,\xff", "invalid UTF-8"},
  };
  for (const Bad& b : bad) {
    const std::string text = "a,b\n1,x\n" + std::string(b.record) + "\n2,y\n";
    std::string got = "no error";
    try {
      csv(text);
    } catch (const ValueError& e) {
      got = e.what();
    }
    CHECK_MSG(got.find("line 3, byte ") == 0 && got.find(b.says) != std::string::npos, b.record << " -> " << got);
  }
  ReadOptions skip;
  skip.skip_errors = true;
  Table t = csv("a,b\n1,2\n3\n4,5,6\n7,8\n", {}, skip);
  CHECK(values<int64_t>(col(t, "a")) == (std::vector<int64_t>{1, 7}));
  CHECK(t.stats.skipped_lines == (std::vector<int64_t>{3, 4}));
  ReadOptions pin;
  pin.dtypes = {{"a", "int32"}};
  CHECK_THROWS(csv("a\n1\n2147483648\n", {}, pin), ValueError, "does not fit in int32");
}

TEST(csv_ranges_split_outside_quotes) {
  Threads threads(3);
  std::string text = "id,note\n";
  const int rows = 20000;  // ~0.5 MB with a quoted newline in every other row
  for (int i = 0; i < rows; ++i)
    text += std::to_string(i) + (i % 2 ? ",\"odd\nrow, " + std::to_string(i) + "\"\n" : ",even\n");
  Table t = csv(text);
  std::vector<int64_t> id = values<int64_t>(col(t, "id"));
  std::vector<std::string> note = strings(col(t, "note"));
  int64_t wrong = 0;
  for (int i = 0; i < rows; ++i)
    wrong += id[size_t(i)] != i || note[size_t(i)] != (i % 2 ? "odd\nrow, " + std::to_string(i) : std::string("even"));
  CHECK_EQ(wrong, 0);
  CHECK_EQ(t.stats.rows, rows);
}

// ---- IDX ------------------------------------------------------------------------------------

namespace {

std::string idx_header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string h = {0, 0, char(type), char(dims.size())};
  for (uint32_t d : dims) h += {char(d >> 24), char(d >> 16), char(d >> 8), char(d)};
  return h;
}
IdxArray idx(const std::string& bytes) { return parse_idx(bytes.data(), bytes.size()); }

}  // namespace

TEST(idx_reads_every_type_big_endian) {
  IdxArray u8 = idx(idx_header(0x08, {2, 3}) + std::string("\x00\x01\x7f\x80\xfe\xff", 6));
  CHECK_EQ(u8.dtype, std::string("uint8"));
  CHECK(u8.shape == (std::vector<int64_t>{2, 3}));
  CHECK_EQ(u8.values.bytes, 6u);
  CHECK_EQ(u8.values.as<uint8_t>()[3], 0x80);
  IdxArray i16 = idx(idx_header(0x0B, {2}) + std::string("\x01\x02\xff\xfe", 4));
  CHECK(i16.values.as<int16_t>()[0] == 0x0102 && i16.values.as<int16_t>()[1] == -2);
  IdxArray i32 = idx(idx_header(0x0C, {1}) + std::string("\x80\x00\x00\x00", 4));
  CHECK_EQ(i32.values.as<int32_t>()[0], INT32_MIN);
  IdxArray f32 = idx(idx_header(0x0D, {2}) + std::string("\x3f\xc0\x00\x00\x80\x00\x00\x00", 8));
  CHECK(test::same(f32.values.as<float>()[0], 1.5f) && test::same(f32.values.as<float>()[1], -0.0f));
  IdxArray f64 = idx(idx_header(0x0E, {1}) + std::string("\xc0\x09\x21\xfb\x54\x44\x2d\x18", 8));
  CHECK_EQ(f64.values.as<double>()[0], -3.141592653589793);
  IdxArray i8 = idx(idx_header(0x09, {1, 1, 1}) + "\xff");
  CHECK(i8.dtype == "int8" && i8.values.as<int8_t>()[0] == -1 && i8.shape.size() == 3);
  IdxArray empty = idx(idx_header(0x0D, {0, 5}));
  CHECK(empty.values.bytes == 0 && empty.shape == (std::vector<int64_t>{0, 5}));
}

TEST(idx_malformed_files_are_value_errors) {
  CHECK_THROWS(idx(""), ValueError, "not an IDX file");
  CHECK_THROWS(idx(std::string("\x00\x00\x08", 3)), ValueError, "not an IDX file");
  CHECK_THROWS(idx(std::string("\x1f\x8b\x08\x01", 4)), ValueError, "not an IDX file");  // gzip
  CHECK_THROWS(idx(idx_header(0x0A, {1}) + "x"), ValueError, "unknown type code 0xa");
  CHECK_THROWS(idx(idx_header(0x08, {})), ValueError, "0 dimensions");
  CHECK_THROWS(idx(idx_header(0x08, {1, 2}).substr(0, 9)), ValueError, "ends inside the header");
  CHECK_THROWS(idx(idx_header(0x0C, {2}) + "abcd"), ValueError, "the header says 2 values of int32");
  CHECK_THROWS(idx(idx_header(0x08, {2}) + "abc"), ValueError, "but the data has 11 bytes");
  CHECK_THROWS(idx(idx_header(0x0E, {0xffffffff, 0xffffffff, 0xffffffff})), ValueError, "sizes overflow");
}

TEST(files_that_cannot_be_read_are_typed_errors) {
  CHECK_THROWS(read_idx("/nonexistent/nexus-test.idx"), OSError, "");
  try {
    read_jsonl("/nonexistent/nexus-test.jsonl", {});
    CHECK_MSG(false, "read_jsonl of a missing file returned");
  } catch (const OSError& e) {
    CHECK_EQ(e.error_number(), ENOENT);
    CHECK_EQ(e.path(), std::string("/nonexistent/nexus-test.jsonl"));
  }
  CHECK_THROWS(read_csv("/", {}, {}), ValueError, "is not a regular file");
  // a real file goes through the mapped path: the same table as parsing the bytes
  char path[] = "/tmp/nexus-test-XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  const std::string text = "a,b\n1,\"x\"\n2,y\n";
  CHECK_EQ(::write(fd, text.data(), text.size()), ssize_t(text.size()));
  ::close(fd);
  Table t = read_csv(path, {}, {});
  ::unlink(path);
  CHECK(values<int64_t>(col(t, "a")) == (std::vector<int64_t>{1, 2}));
  CHECK(strings(col(t, "b")) == (std::vector<std::string>{"x", "y"}));
}
