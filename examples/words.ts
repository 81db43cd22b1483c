// TypeScript runs as is: the types are stripped (not checked) on the host,
// and errors point at these lines. `pml run examples/words.ts`
interface Counted { text: string; words: number }

const texts: string[] = ["one two three", "four five", "six"];
const counted: Counted[] = await Promise.all(
  texts.map(async (text): Promise<Counted> => {
    const { words = 0 } = await mcp.demo.word_count({ text });
    return { text, words };
  }),
);
console.log(`${counted.length} texts counted`);
return counted.sort((a, b) => b.words - a.words)[0];
