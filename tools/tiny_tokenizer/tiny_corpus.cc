#include "tools/tiny_tokenizer/tiny_corpus.h"

namespace mxserve {

std::string_view TinyTokenizerCorpus() {
  static constexpr std::string_view kCorpus = R"CORPUS(The quick brown fox jumps over the lazy dog. The dog does not mind; it is a very lazy dog.
What is 2 + 2? The answer is 4. What is 12 + 30? The answer is 42.
You are a helpful assistant. Answer the question as well as you can, and say when you do not know.
Hello, world! Hello there. How are you today? I am fine, thank you, and how are you?
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of
foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light,
it was the season of Darkness, it was the spring of hope, it was the winter of despair.
In the beginning the model reads the prompt, one token at a time, and then it writes an answer.
A mixture of experts sends each token to a few of its many experts; the router picks them, and
the outputs are added with the router's weights. The experts are stored in four bits per weight.
Weather report: sunny in the morning, clouds in the afternoon, and rain in the evening.
The temperature will be 21 degrees, the wind from the west at 15 km/h, humidity 60%.
Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday.
January, February, March, April, May, June, July, August, September, October, November, December.
one two three four five six seven eight nine ten eleven twelve hundred thousand million
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 32 64 100 128 256 512 1000 1024 2048 4096
3.14159 2.71828 1.41421 0.5 0.25 -1 -42 1e-5 6.02e23 2025-06-28 12:34:56 $19.99 100%
user: Can you write a function that adds two numbers?
assistant: Sure. Here is one in Python:

def add(a, b):
    """Return the sum of a and b."""
    return a + b

print(add(2, 3))  # 5

And here is the same in C++:

#include <iostream>

int add(int a, int b) { return a + b; }

int main() {
  std::cout << add(2, 3) << std::endl;
  return 0;
}

for (int i = 0; i < n; ++i) {
  if (x[i] > max_value) {
    max_value = x[i];
  }
}

const result = await fetch("https://example.com/api/v1/items?limit=10");
const items = await result.json();
console.log(items.map((item) => item.name).join(", "));

{"name": "get_weather", "arguments": {"location": "San Francisco", "unit": "celsius"}}
[1, 2, 3, 4, 5]  {"a": true, "b": false, "c": null}

SELECT id, name FROM users WHERE age >= 18 ORDER BY name;
git commit -m "fix: handle empty input" && git push origin main

The cat sat on the mat. The cat is black and white, and it likes to sleep in the sun.
She said: "Don't worry, we'll be there soon." He replied: "I'm sure you're right, but they've left."
Questions? Answers! Lists: apples, oranges, pears; tools -- hammers, saws; ideas... many.
	Tabs	and    spaces   and
new lines

and blank lines.

你好，世界！今天天气很好。我们去公园散步吧。
こんにちは、世界。日本語のテキストです。
안녕하세요, 세계!
Привет, мир! Как дела?
¿Dónde está la biblioteca? Ça va très bien, merci. Grüße aus München.
Emoji: 😀 😃 😄 👍 🎉 ❤️ 👩‍💻 🚀 ✨ 🌍
Math: x² + y² = z², α + β = γ, ∑ from i = 1 to n of i = n(n + 1) / 2, π ≈ 3.14.
The end. Thank you for reading. The quick brown fox jumps over the lazy dog again and again.
)CORPUS";
  return kCorpus;
}

}  // namespace mxserve
