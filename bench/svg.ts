/**
 * @module A dependency-free horizontal bar chart as an SVG string, for docs/bench/*.svg.
 */

export interface Bar {
  readonly label: string;
  readonly value: number;
}

const escape = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * One horizontal bar per row, scaled to the largest value, with the value printed after each bar (under 100, with
 * `digits` decimals).
 *
 * @example
 * writeFileSync('chart.svg', barChart('Requests/s', [{ label: 'plain', value: 3000 }], 'req/s'))
 */
export function barChart(title: string, bars: readonly Bar[], unit: string, digits = 1): string {
  const labelWidth = 240;
  const barWidth = 420;
  const row = 24;
  const top = 40;
  const width = labelWidth + barWidth + 120;
  const height = top + bars.length * row + 16;
  const finite = bars.map((bar) => (Number.isFinite(bar.value) ? bar.value : 0));
  const max = Math.max(1, ...finite.map((value) => Math.abs(value)));
  const rows = bars.map((bar, i) => {
    const value = finite[i] ?? 0;
    const y = top + i * row;
    const w = Math.max(1, Math.round((Math.abs(value) / max) * barWidth));
    const fill =
      bar.label.startsWith('Idem') || bar.label.includes(': ')
        ? bar.label.startsWith('no Idem')
          ? '#888'
          : '#3b6ea5'
        : '#888';
    const shown = Math.abs(value) >= 100 ? Math.round(value).toLocaleString('en-US') : value.toFixed(digits);
    return [
      `<text x="${labelWidth - 8}" y="${y + 15}" text-anchor="end">${escape(bar.label)}</text>`,
      `<rect x="${labelWidth}" y="${y + 3}" width="${w}" height="${row - 8}" fill="${bar.label.startsWith('no Idem') || bar.label.includes('floor') ? '#999' : fill}"/>`,
      `<text x="${labelWidth + w + 6}" y="${y + 15}">${escape(`${shown} ${unit}`)}</text>`,
    ].join('');
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="12" y="22" font-size="14" font-weight="bold">${escape(title)}</text>`,
    ...rows,
    '</svg>',
    '',
  ].join('\n');
}
