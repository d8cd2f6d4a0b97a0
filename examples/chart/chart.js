// Computes how many primes each block of 1,000 numbers below 20,000
// holds and draws them as a bar chart into chart.png, with the PNG
// encoder beside it (./png.js). No network, no package: plain
// JavaScript on the computer's files.
import { writeFile } from "node:fs/promises";
import { encodePng } from "./png.js";

const W = 640, H = 360, BLOCK = 1000, BLOCKS = 20;

function primesBelow(n) {
  const sieve = new Uint8Array(n);
  const counts = new Array(BLOCKS).fill(0);
  for (let i = 2; i < n; i++) {
    if (sieve[i]) continue;
    counts[Math.floor(i / BLOCK)]++;
    for (let j = i * i; j < n; j += i) sieve[j] = 1;
  }
  return counts;
}

export default async function draw() {
  const counts = primesBelow(BLOCK * BLOCKS);
  const rgb = new Uint8Array(W * H * 3).fill(255);
  const put = (x, y, [r, g, b]) => {
    const i = (y * W + x) * 3;
    rgb[i] = r; rgb[i + 1] = g; rgb[i + 2] = b;
  };
  const rect = (x0, y0, x1, y1, color) => {
    for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) put(x, y, color);
  };
  const left = 40, bottom = H - 30, top = 20;
  rect(left, top, left + 2, bottom, [40, 40, 40]); // y axis
  rect(left, bottom, W - 20, bottom + 2, [40, 40, 40]); // x axis
  const max = Math.max(...counts);
  const slot = Math.floor((W - 20 - left) / BLOCKS);
  counts.forEach((n, i) => {
    const h = Math.round(((bottom - top) * n) / max);
    rect(left + 4 + i * slot, bottom - h, left + i * slot + slot - 2, bottom, [29, 78, 216]);
  });
  const png = encodePng(W, H, rgb);
  await writeFile("chart.png", png);
  return { width: W, height: H, bytes: png.length, primes_per_block: counts };
}
